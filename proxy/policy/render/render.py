"""The envelope's renderings (docs/contract.md §2): which one writes a body, and json and
problem+json.

One envelope, five renderings: ``json`` (the canonical document), ``problem`` (RFC 9457),
``text`` and ``markdown`` (for tool layers that hand the model a string: a recovery plan in prose,
then the JSON on one line) and ``xml`` (``<tool_error>``). Every rendering carries the same facts;
each one escapes upstream-derived text for its own syntax, so an upstream message can never add
structure (elements, headings, list items, lines, header fields) to what the agent reads.

Here: the choice of renderer, ``json`` and ``problem``; ``prose.py`` writes ``text`` and
``markdown``, ``xmlrender.py`` writes ``xml``, and ``negotiation.py`` picks the rendering from
``Accept``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from proxy.config.choices import Rendering
from proxy.policy.envelope.model import Envelope
from proxy.policy.render.jsontext import json_bytes
from proxy.policy.render.prose import MARKDOWN, PLAIN, render_prose
from proxy.policy.render.xmlrender import render_xml

CONTENT_TYPES: Mapping[Rendering, str] = {
    # RFC 8259 defines no charset parameter for JSON: it is always UTF-8.
    Rendering.JSON: "application/json",
    Rendering.PROBLEM: "application/problem+json",
    Rendering.TEXT: "text/plain; charset=utf-8",
    Rendering.MARKDOWN: "text/markdown; charset=utf-8",
    Rendering.XML: "application/xml; charset=utf-8",
}

_HEADER_UNSAFE = re.compile(r"[^\x20-\x7e]+")


def safe_header_value(value: str, limit: int = 256) -> str:
    """``value`` fit for a response header: visible ASCII only, at most ``limit`` characters.

    CR/LF/NUL would split or truncate the header block; non-ASCII has no agreed encoding in
    HTTP/1.1 field values. Headers are for branching (codes, ids), so dropping is acceptable.
    """
    return _HEADER_UNSAFE.sub("", value).strip()[:limit].strip()


def _title(code: str) -> str:
    """``VALIDATION_FAILED`` -> ``Validation failed``."""
    words = code.replace("_", " ").replace("-", " ").split()
    return " ".join(words).capitalize() if words else "Error"


def _render_json(envelope: Envelope) -> bytes:
    return json_bytes({"error": envelope.as_dict()})


def _problem_errors(envelope: Envelope) -> list[dict[str, str]]:
    if envelope.invalid_fields:
        return [{"pointer": f.field, "detail": f.reason} for f in envelope.invalid_fields]
    if envelope.field is not None:
        return [{"pointer": envelope.field, "detail": envelope.message}]
    return []


def _render_problem(envelope: Envelope, status: int) -> bytes:
    if envelope.docs_url:
        problem_type, title = envelope.docs_url, _title(envelope.code)
    else:
        # RFC 9457 §4.2.1: with about:blank the title SHOULD be the status phrase.
        problem_type = "about:blank"
        try:
            title = HTTPStatus(status).phrase
        except ValueError:
            title = _title(envelope.code)
    document: dict[str, Any] = {
        "type": problem_type,
        "title": title,
        "status": status,
        "detail": envelope.message,
        "instance": f"urn:request:{envelope.request_id}",
    }
    document.update(envelope.as_dict())
    document["errors"] = _problem_errors(envelope)
    return json_bytes(document)


def render(
    envelope: Envelope, rendering: Rendering, status: int, *, tool: str | None = None
) -> tuple[bytes, str]:
    """Body bytes and Content-Type for ``envelope``; ``status`` is what the response carries.

    ``tool``: the envelope answers an MCP tool call, so the prose says the tool failed, not the
    HTTP response (which was a 200 carrying the tool's error)."""
    if rendering is Rendering.PROBLEM:
        body = _render_problem(envelope, status)
    elif rendering is Rendering.TEXT:
        body = render_prose(envelope, PLAIN, tool)
    elif rendering is Rendering.MARKDOWN:
        body = render_prose(envelope, MARKDOWN, tool)
    elif rendering is Rendering.XML:
        body = render_xml(envelope)
    else:
        body = _render_json(envelope)
    return body, CONTENT_TYPES[rendering]
