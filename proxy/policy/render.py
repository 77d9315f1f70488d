"""Renderings of the envelope and the choice between them (CONTRACT §2).

One envelope, five renderings: ``json`` (the canonical document), ``problem`` (RFC 9457),
``text`` and ``markdown`` (for tool layers that hand the model a string: a recovery plan in prose,
then the JSON on one line) and ``xml`` (``<tool_error>``). Every rendering carries the same facts;
each one escapes upstream-derived text for its own syntax, so an upstream message can never add
structure (elements, headings, list items, lines, header fields) to what the agent reads.

``negotiate`` picks the rendering from ``Accept`` (RFC 9110 §12.5.1); ``Negotiator`` is the same
with a small cache, because an agent sends the same ``Accept`` on every call.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Any, NamedTuple

import orjson

from proxy.config.choices import Rendering
from proxy.policy.accept import media_ranges
from proxy.policy.envelope import Action, Category, Envelope
from proxy.policy.shorten import shortened

CONTENT_TYPES: Mapping[Rendering, str] = {
    # RFC 8259 defines no charset parameter for JSON: it is always UTF-8.
    Rendering.JSON: "application/json",
    Rendering.PROBLEM: "application/problem+json",
    Rendering.TEXT: "text/plain; charset=utf-8",
    Rendering.MARKDOWN: "text/markdown; charset=utf-8",
    Rendering.XML: "application/xml; charset=utf-8",
}

# ---------------------------------------------------------------------------------------------
# Content negotiation
# ---------------------------------------------------------------------------------------------

#: (type, subtype, rendering) in the order used as the last tie-break.
_OFFERS: tuple[tuple[str, str, Rendering], ...] = (
    ("application", "json", Rendering.JSON),
    ("application", "problem+json", Rendering.PROBLEM),
    ("text", "plain", Rendering.TEXT),
    ("text", "markdown", Rendering.MARKDOWN),
    ("application", "xml", Rendering.XML),
    ("text", "xml", Rendering.XML),
    ("application", "problem+xml", Rendering.XML),
)
_OFFER_ORDER: Mapping[Rendering, int] = {r: i for i, r in enumerate(Rendering)}


class _Score(NamedTuple):
    """How acceptable one rendering is: the best of its media types against the header."""

    q: float
    specificity: int  # 2 = type/subtype, 1 = type/*, 0 = */*
    position: int  # index in the header of the range that matched

    def key(self) -> tuple[float, int, int]:
        return (self.q, self.specificity, -self.position)


_Prefs = tuple[tuple[Rendering, _Score], ...]


def _preferences(accept: str) -> _Prefs:
    """Each rendering the header accepts at all, with its score (independent of the default)."""
    ranges = media_ranges(accept)
    best: dict[Rendering, _Score] = {}
    for kind, subtype, rendering in _OFFERS:
        match: _Score | None = None
        for position, media in enumerate(ranges):
            specificity = media.specificity(kind, subtype)
            if specificity is None:
                continue
            # The most specific range decides (RFC 9110 §12.5.1); among equally specific
            # duplicates the most generous one wins.
            if (
                match is None
                or specificity > match.specificity
                or (specificity == match.specificity and media.q > match.q)
            ):
                match = _Score(media.q, specificity, position)
        if match is None or match.q <= 0.0:
            continue
        current = best.get(rendering)
        if current is None or match.key() > current.key():
            best[rendering] = match
    return tuple(best.items())


def _pick(prefs: _Prefs, default: Rendering) -> Rendering:
    if not prefs:
        return default
    top_q = max(score.q for _, score in prefs)
    tied = [(r, s) for r, s in prefs if s.q == top_q]
    top_specificity = max(s.specificity for _, s in tied)
    tied = [(r, s) for r, s in tied if s.specificity == top_specificity]
    if any(r is default for r, _ in tied):
        return default
    return min(tied, key=lambda item: (item[1].position, _OFFER_ORDER[item[0]]))[0]


def negotiate(accept: str | None, default: Rendering) -> Rendering:
    """The rendering ``Accept`` asks for; ``default`` when absent, ``*/*`` or unsatisfiable.

    Never raises: a malformed range is skipped, and a header with nothing we offer gets the
    default rather than a 406, because an agent is better served by some envelope than none.
    """
    if not accept or not accept.strip():
        return default
    return _pick(_preferences(accept), default)


class Negotiator:
    """``negotiate`` with a bounded least-recently-used cache of parsed headers.

    Built once per process and passed to the handler; agents repeat the same ``Accept`` on every
    call, so parsing once per distinct header is enough.
    """

    #: Longer headers are parsed but not kept, so the cache's memory stays bounded.
    MAX_CACHED_LENGTH = 1024

    def __init__(self, max_entries: int = 256) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._max_entries = max_entries
        self._cache: dict[str, _Prefs] = {}

    def __len__(self) -> int:
        return len(self._cache)

    def __contains__(self, accept: object) -> bool:
        return accept in self._cache

    def choose(self, accept: str | None, default: Rendering) -> Rendering:
        if not accept or not accept.strip():
            return default
        prefs = self._cache.pop(accept, None)
        if prefs is None:
            prefs = _preferences(accept)
            if len(accept) > self.MAX_CACHED_LENGTH:
                return _pick(prefs, default)
            if len(self._cache) >= self._max_entries:
                del self._cache[next(iter(self._cache))]
        # Re-inserting moves the entry to the end: dict order is the recency order.
        self._cache[accept] = prefs
        return _pick(prefs, default)


# ---------------------------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------------------------

_HEADER_UNSAFE = re.compile(r"[^\x20-\x7e]+")
#: Line breaks of every kind, C0/C1 controls and bidi overrides: in a one-line slot any of them
#: could fake structure (a new line, a reordered display).
_LINE_UNSAFE = re.compile(r"[\s\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]+")
_SURROGATE = re.compile("[\ud800-\udfff]")
_XML_ILLEGAL = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_XML_TEXT = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "\r": "&#13;"})
_XML_ATTR = str.maketrans(
    {
        "&": "&amp;",
        "<": "&lt;",
        ">": "&gt;",
        '"': "&quot;",
        "\r": "&#13;",
        "\n": "&#10;",
        "\t": "&#9;",
    }
)
#: Markdown that can change structure mid-line: raw HTML and autolinks (<), code spans (`),
#: links ([ ]), and the backslash itself so an upstream one cannot undo ours. Emphasis is left
#: alone: it only changes style, and escaping ``_`` would corrupt identifiers an agent copies.
_MD_SPECIAL = re.compile(r"([\\`<\[\]])")
#: Characters JSON leaves raw that other layers treat as line breaks (str.splitlines, JS).
_JSON_LINE_ESCAPES = (
    ("\u2028".encode(), b"\\u2028"),
    ("\u2029".encode(), b"\\u2029"),
    ("\x85".encode(), b"\\u0085"),
)
#: Inside a JSON string these are plain characters; escaped, a Markdown renderer cannot read
#: them as HTML or code spans. They never occur outside strings in JSON, so this is safe.
_JSON_MD_ESCAPES = (
    (b"<", b"\\u003c"),
    (b">", b"\\u003e"),
    (b"&", b"\\u0026"),
    (b"`", b"\\u0060"),
)
_NL_VALUE_LIMIT = 1000
_NL_JSON_LIMIT = 200


def safe_header_value(value: str, limit: int = 256) -> str:
    """``value`` fit for a response header: visible ASCII only, at most ``limit`` characters.

    CR/LF/NUL would split or truncate the header block; non-ASCII has no agreed encoding in
    HTTP/1.1 field values. Headers are for branching (codes, ids), so dropping is acceptable.
    """
    return _HEADER_UNSAFE.sub("", value).strip()[:limit].strip()


def _unsurrogate(text: str) -> str:
    """Pairs of surrogates become the character they encode, lone ones U+FFFD.

    Python strings hold surrogates only when bytes were decoded with ``surrogateescape``; no
    encoder may write them as they are (strict UTF-8 refuses, and many JSON parsers reject a
    lone ``\\ud800`` escape), so every rendering maps them the same way.
    """
    if not _SURROGATE.search(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _jsonable(value: Any) -> Any:
    if isinstance(value, str):
        return _unsurrogate(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {_jsonable(str(k)): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _dumps(value: Any) -> bytes:
    """Compact JSON; never raises on what a JSON-mode model dump can hold."""
    try:
        return orjson.dumps(value)
    except TypeError:
        # orjson refuses integers beyond 64 bits and surrogates, both of which can come from an
        # upstream; the stdlib writes big integers exactly once surrogates are mapped.
        text = json.dumps(
            _jsonable(value),
            ensure_ascii=False,
            separators=(",", ":"),
            default=str,
            allow_nan=False,
        )
        return text.encode("utf-8")


def json_bytes(value: Any) -> bytes:
    """Compact JSON of ``value`` (a parsed upstream document included); never raises."""
    return _dumps(value)


def _json_text(value: Any) -> str:
    return _dumps(value).decode("utf-8")


def _title(code: str) -> str:
    """``VALIDATION_FAILED`` -> ``Validation failed``."""
    words = code.replace("_", " ").replace("-", " ").split()
    return " ".join(words).capitalize() if words else "Error"


# ---------------------------------------------------------------------------------------------
# json and problem+json
# ---------------------------------------------------------------------------------------------


def _render_json(envelope: Envelope) -> bytes:
    return _dumps({"error": envelope.as_dict()})


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
    return _dumps(document)


# ---------------------------------------------------------------------------------------------
# text and markdown
# ---------------------------------------------------------------------------------------------

_CAUSES: Mapping[Category, str] = {
    Category.VALIDATION: "The request has a missing, malformed or out-of-range value.",
    Category.AUTH: "The credentials are missing, expired or invalid.",
    Category.PERMISSION: "The credentials are valid but not allowed to perform this operation.",
    Category.NOT_FOUND: "The resource or path does not exist, or an identifier is wrong.",
    Category.CONFLICT: "The request conflicts with the resource's current state "
    "(a duplicate or a concurrent change).",
    Category.PRECONDITION: "The resource is not in the state this operation requires; "
    "another operation has to come first.",
    Category.RATE_LIMIT: "Too many requests in a short time; the API is throttling this client.",
    Category.UNAVAILABLE: "The API is temporarily down, overloaded or in maintenance.",
    Category.TIMEOUT: "The API did not answer in time.",
    Category.INTERNAL: "The API failed internally; the request itself may be valid.",
    Category.PAYLOAD_TOO_LARGE: "The request or response body is larger than allowed.",
    Category.UNSUPPORTED_MEDIA: "The request's Content-Type or encoding is not accepted.",
    Category.METHOD_NOT_ALLOWED: "The HTTP method is not allowed on this path.",
    Category.DEPENDENCY: "A service the API depends on failed.",
}


def _one_line(text: str, limit: int = _NL_VALUE_LIMIT) -> str:
    text = _LINE_UNSAFE.sub(" ", _unsurrogate(text)).strip()
    return shortened(text, limit)


def _plain(text: str) -> str:
    return _one_line(text)


def _md(text: str) -> str:
    return _MD_SPECIAL.sub(r"\\\1", _one_line(text))


def _md_code(text: str) -> str:
    """A code span when the text allows one; escaped text otherwise."""
    text = _one_line(text)
    return f"`{text}`" if text and "`" not in text else _MD_SPECIAL.sub(r"\\\1", text)


def _value(value: Any) -> str:
    return _one_line(_json_text(value), _NL_JSON_LIMIT)


def _expected(allowed: Any) -> str:
    """``{"minimum": 1}`` -> ``minimum 1``; ``["a", "b"]`` -> ``one of "a", "b"``."""
    if isinstance(allowed, dict) and allowed:
        return ", ".join(f"{key} {_json_text(v)}" for key, v in allowed.items())
    if isinstance(allowed, list) and allowed:
        return "one of " + ", ".join(_json_text(v) for v in allowed)
    return _json_text(allowed)


class _Style(NamedTuple):
    text: Callable[[str], str]  # escapes upstream prose
    code: Callable[[str], str]  # escapes identifiers (codes, pointers, operations, values)
    markdown: bool


_PLAIN = _Style(_plain, _plain, markdown=False)
_MARKDOWN = _Style(_md, _md_code, markdown=True)


def _retry_line(envelope: Envelope, style: _Style) -> str:
    action = envelope.action
    if envelope.applied == "unknown" and action is not Action.RETRY:
        return "Not yet: the request may already have taken effect; check first (see below)."
    if action is Action.RETRY:
        return (
            f"Yes. Send the same request unchanged after {envelope.retry_after_ms} ms."
            if envelope.retry_after_ms is not None
            else "Yes. Send the same request unchanged."
        )
    if action is Action.FIX_REQUEST:
        return "Only after changing the request as described below."
    if action is Action.CALL_OTHER_OPERATION:
        if envelope.next_operation:
            return f"Only after calling {style.code(envelope.next_operation)} first (see below)."
        return "Only after completing the steps below."
    if action is Action.REAUTHENTICATE:
        return "Only after obtaining fresh credentials."
    if action is Action.ESCALATE:
        return "No. Do not retry; tell the user what failed."
    return "No. The API or the proxy is at fault; report it with the request id."


_FALLBACK_STEPS: Mapping[Action, str] = {
    Action.RETRY: "Wait as long as the Retry line says, then send the same request again.",
    Action.FIX_REQUEST: "Correct the request according to the message, then send it again.",
    Action.CALL_OTHER_OPERATION: "Call the operation the message names, then send the request "
    "again.",
    Action.REAUTHENTICATE: "Obtain fresh credentials, then send the request again.",
    Action.ESCALATE: "Tell the user what failed; do not retry.",
    Action.REPORT_BUG: "Report this error with its request id; do not retry.",
}


def _field_step(item: Mapping[str, Any], data: Mapping[str, Any], style: _Style) -> str:
    """One step per invalid field, seed-004 style: reason, what was sent, what is expected."""
    parts = [f"Fix {style.code(item['field'])}: {style.text(item['reason'])}."]
    if item["received"] is not None:
        parts.append(f"You sent: {style.code(_value(item['received']))}.")
    own = item["field"] == data["field"]
    allowed = item["allowed_values"]
    if allowed is None and own:
        allowed = data["allowed_values"]
    if allowed is not None:
        parts.append(f"Expected: {style.code(_one_line(_expected(allowed), _NL_JSON_LIMIT))}.")
    if own and data["suggested_value"] is not None:
        parts.append(f"Suggested value: {style.code(_value(data['suggested_value']))}.")
    return " ".join(parts)


def _steps(envelope: Envelope, data: Mapping[str, Any], style: _Style) -> list[str]:
    """Numbered recovery steps; values come from ``data`` so they say what the JSON says."""
    # Steps and hint are upstream-derived and may scrub down to nothing; the plan never does.
    steps = [text for s in envelope.steps if (text := style.text(s))]
    steps = steps or [style.text(envelope.hint) or _FALLBACK_STEPS[envelope.action]]
    if envelope.next_operation:
        call = f"Call {style.code(envelope.next_operation)}"
        if data["next_operation_args"]:
            call += f" with arguments {style.code(_value(data['next_operation_args']))}"
        elif any(step.startswith(call) for step in steps):
            call = ""  # the steps already say it, and there is nothing to add
        if call:
            steps.append(call + ".")
    if envelope.action is Action.RETRY:
        return steps  # the same request, unchanged: nothing to fix
    fields = data["invalid_fields"]
    # a field's own step says what the generic "Change /x: reason." said, and more
    changes = tuple(f"Change {item['field']}:" for item in fields)
    steps = [step for step in steps if not step.startswith(changes)] if changes else steps
    steps.extend(_field_step(item, data, style) for item in fields)
    field, allowed, suggested = data["field"], data["allowed_values"], data["suggested_value"]
    # Whatever the per-field steps did not already say about the main field gets its own step.
    if not any(item["field"] == field for item in data["invalid_fields"]) and (
        field is not None or allowed is not None or suggested is not None
    ):
        parts = [f"Fix {style.code(field)}." if field is not None else "Fix the input."]
        if allowed is not None:
            expected = _one_line(_expected(allowed), _NL_JSON_LIMIT)
            parts.append(f"Expected: {style.code(expected)}.")
        if suggested is not None:
            parts.append(f"Suggested value: {style.code(_value(suggested))}.")
        steps.append(" ".join(parts))
    return steps


def _what_failed(envelope: Envelope, style: _Style, tool: str | None = None) -> str:
    facts = (
        f"category {style.code(envelope.category.value)}, "
        f"severity {style.code(envelope.severity.value)}"
    )
    if tool is not None:  # "": a tool whose name the request did not say
        named = f"The tool {style.code(tool)}" if tool else "The tool"
        return f"{named} reported an error ({facts})."
    if envelope.upstream_status is None:
        return f"The proxy got no usable response from the API ({facts})."
    return f"The API answered HTTP {envelope.upstream_status} ({facts})."


def _json_line(data: dict[str, Any], markdown: bool) -> bytes:
    line = _dumps({"error": data})
    for raw, escaped in _JSON_LINE_ESCAPES:
        line = line.replace(raw, escaped)
    if markdown:
        for raw, escaped in _JSON_MD_ESCAPES:
            line = line.replace(raw, escaped)
    return line


def _render_prose(envelope: Envelope, style: _Style, tool: str | None = None) -> bytes:
    message = style.text(envelope.message)
    title = f"Error {style.code(envelope.code)}" + (f": {message}" if message else "")
    data = envelope.as_dict()
    steps = _steps(envelope, data, style)
    causes = _CAUSES.get(envelope.category, "")
    request_id = style.code(envelope.request_id)
    if style.markdown:
        lines = [
            f"## {title}",
            "",
            f"**What failed:** {_what_failed(envelope, style, tool)}",
            "",
            "**Possible causes:**",
            "",
            f"- {causes}",
            "",
            f"**Retry:** {_retry_line(envelope, style)}",
            "",
            "**Action required:**",
            "",
            *(f"{n}. {step}" for n, step in enumerate(steps, 1)),
            "",
            f"**Request ID:** {request_id}",
        ]
    else:
        lines = [
            title,
            f"What failed: {_what_failed(envelope, style, tool)}",
            "Possible causes:",
            f"- {causes}",
            f"Retry: {_retry_line(envelope, style)}",
            "Action required:",
            *(f"{n}. {step}" for n, step in enumerate(steps, 1)),
            f"Request ID: {request_id}",
        ]
    lines += ["", ""]
    return "\n".join(lines).encode("utf-8") + _json_line(data, style.markdown) + b"\n"


# ---------------------------------------------------------------------------------------------
# xml
# ---------------------------------------------------------------------------------------------


def _xt(text: str) -> str:
    return _XML_ILLEGAL.sub("", _unsurrogate(text)).translate(_XML_TEXT)


def _xa(text: str) -> str:
    return '"' + _XML_ILLEGAL.sub("", _unsurrogate(text)).translate(_XML_ATTR) + '"'


def _xv(value: Any) -> str:
    """Values (received, allowed, suggested, args) are JSON text, so their type survives."""
    return _xt(_json_text(value))


def _available_actions(envelope: Envelope) -> list[str]:
    actions = [envelope.action.value]
    if envelope.next_operation and envelope.next_operation not in actions:
        actions.append(envelope.next_operation)
    return actions


def _render_xml(envelope: Envelope) -> bytes:
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f"<tool_error code={_xa(envelope.code)} severity={_xa(envelope.severity.value)}>",
        f"  <message>{_xt(envelope.message)}</message>",
        f"  <category>{_xt(envelope.category.value)}</category>",
        f"  <retryable>{'true' if envelope.retryable else 'false'}</retryable>",
    ]
    if envelope.retry_after_ms is not None:
        out.append(f"  <retry_after_ms>{envelope.retry_after_ms}</retry_after_ms>")
    if envelope.applied is not None:
        out.append(f"  <applied>{_xt(envelope.applied)}</applied>")
    out.append(f"  <action>{_xt(envelope.action.value)}</action>")
    out.append("  <recovery>")
    out.append(f"    <hint>{_xt(envelope.hint)}</hint>")
    out.extend(f'    <step n="{n}">{_xt(step)}</step>' for n, step in enumerate(envelope.steps, 1))
    out.append("  </recovery>")
    out.append("  <available_actions>")
    out.extend(f"    <action>{_xt(a)}</action>" for a in _available_actions(envelope))
    out.append("  </available_actions>")
    # Values come from the JSON-mode dump so that the XML says exactly what the JSON says.
    data = envelope.as_dict()
    if envelope.field is not None and all(
        item.field != envelope.field for item in envelope.invalid_fields
    ):
        out.append(f"  <field pointer={_xa(envelope.field)}/>")
    for item in data["invalid_fields"]:
        out.append(f"  <field pointer={_xa(item['field'])}>")
        out.append(f"    <reason>{_xt(item['reason'])}</reason>")
        if item["received"] is not None:
            out.append(f"    <received>{_xv(item['received'])}</received>")
        if item["allowed_values"] is not None:
            out.append(f"    <allowed_values>{_xv(item['allowed_values'])}</allowed_values>")
        out.append("  </field>")
    if data["allowed_values"] is not None:
        out.append(f"  <allowed_values>{_xv(data['allowed_values'])}</allowed_values>")
    if data["suggested_value"] is not None:
        out.append(f"  <suggested_value>{_xv(data['suggested_value'])}</suggested_value>")
    if envelope.next_operation is not None:
        out.append("  <next_operation>")
        out.append(f"    <operation>{_xt(envelope.next_operation)}</operation>")
        for name, arg in (data["next_operation_args"] or {}).items():
            out.append(f"    <arg name={_xa(str(name))}>{_xv(arg)}</arg>")
        out.append("  </next_operation>")
    if envelope.related_codes:
        out.append("  <related_codes>")
        out.extend(f"    <code>{_xt(c)}</code>" for c in envelope.related_codes)
        out.append("  </related_codes>")
    if envelope.docs_url is not None:
        out.append(f"  <docs_url>{_xt(envelope.docs_url)}</docs_url>")
    out.append(f"  <request_id>{_xt(envelope.request_id)}</request_id>")
    if envelope.upstream_status is not None:
        out.append(f"  <upstream_status>{envelope.upstream_status}</upstream_status>")
    out.append(f"  <rule>{_xt(envelope.rule)}</rule>")
    out.append("</tool_error>")
    # _xt/_xa mapped every surrogate, so strict UTF-8 cannot fail here.
    return ("\n".join(out) + "\n").encode("utf-8")


# ---------------------------------------------------------------------------------------------


def render(
    envelope: Envelope, rendering: Rendering, status: int, *, tool: str | None = None
) -> tuple[bytes, str]:
    """Body bytes and Content-Type for ``envelope``; ``status`` is what the response carries.

    ``tool``: the envelope answers an MCP tool call, so the prose says the tool failed, not the
    HTTP response (which was a 200 carrying the tool's error)."""
    if rendering is Rendering.PROBLEM:
        body = _render_problem(envelope, status)
    elif rendering is Rendering.TEXT:
        body = _render_prose(envelope, _PLAIN, tool)
    elif rendering is Rendering.MARKDOWN:
        body = _render_prose(envelope, _MARKDOWN, tool)
    elif rendering is Rendering.XML:
        body = _render_xml(envelope)
    else:
        body = _render_json(envelope)
    return body, CONTENT_TYPES[rendering]
