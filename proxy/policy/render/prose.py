"""The ``text`` and ``markdown`` renderings: a recovery plan in prose, then the JSON on one line."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from proxy.policy.envelope.model import Action, Category, Envelope
from proxy.policy.render.jsontext import json_bytes, json_text, unsurrogate
from proxy.policy.shorten import shortened

#: Line breaks of every kind, C0/C1 controls and bidi overrides: in a one-line slot any of them
#: could fake structure (a new line, a reordered display).
_LINE_UNSAFE = re.compile(r"[\s\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]+")
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
    Category.UNCLASSIFIED: "Not one the proxy recognises: the message is the tool's own account "
    "of what failed, and all that is known.",
}


def _one_line(text: str, limit: int = _NL_VALUE_LIMIT) -> str:
    text = _LINE_UNSAFE.sub(" ", unsurrogate(text)).strip()
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
    return _one_line(json_text(value), _NL_JSON_LIMIT)


#: JSON Schema's exclusive bounds, as a sentence says them.
_BOUND_WORDS = {"exclusiveMinimum": "greater than", "exclusiveMaximum": "less than"}


def _expected(allowed: Any) -> str:
    """``{"minimum": 1}`` -> ``minimum 1``; ``["a", "b"]`` -> ``one of "a", "b"``."""
    if isinstance(allowed, dict) and allowed:
        return ", ".join(
            f"{_BOUND_WORDS.get(key, key)} {json_text(v)}" for key, v in allowed.items()
        )
    if isinstance(allowed, list) and allowed:
        return "one of " + ", ".join(json_text(v) for v in allowed)
    return json_text(allowed)


class _Style(NamedTuple):
    text: Callable[[str], str]  # escapes upstream prose
    code: Callable[[str], str]  # escapes identifiers (codes, pointers, operations, values)
    markdown: bool


PLAIN = _Style(_plain, _plain, markdown=False)
MARKDOWN = _Style(_md, _md_code, markdown=True)


#: The Retry line of the actions whose line names nothing of the envelope.
_RETRY_LINES: Mapping[Action, str] = {
    Action.FIX_REQUEST: "Only after changing the request as described below.",
    Action.REAUTHENTICATE: "Only after obtaining fresh credentials.",
    Action.ESCALATE: "No. Do not retry; tell the user what failed.",
}
_REPORT_LINE = "No. The API or the proxy is at fault; report it with the request id."


def _retry_line(envelope: Envelope, style: _Style) -> str:
    line = _retry_advice(envelope, style)
    tried = envelope.attempts
    if tried is None:
        return line
    return f"{line} (mend already sent it {tried.count} times over {tried.elapsed_ms} ms.)"


def _retry_advice(envelope: Envelope, style: _Style) -> str:
    action = envelope.action
    if envelope.applied == "unknown" and action is not Action.RETRY:
        return "Not yet: the request may already have taken effect; check first (see below)."
    if action is Action.RETRY:
        wait = envelope.retry_after_ms
        after = f" after {wait} ms" if wait is not None else ""
        return f"Yes. Send the same request unchanged{after}."
    if action is Action.CALL_OTHER_OPERATION:
        if envelope.next_operation:
            return f"Only after calling {style.code(envelope.next_operation)} first (see below)."
        return "Only after completing the steps below."
    return _RETRY_LINES.get(action, _REPORT_LINE)


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


#: a step that sends the request (or calls the tool) again: fixes come before it
_RESEND = re.compile(r"\b(?:send|call)\b.*\bagain\b", re.IGNORECASE)


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
    fixes = [_field_step(item, data, style) for item in fields]
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
        fixes.append(" ".join(parts))
    if not fixes:
        return steps
    # the fixes stand where the steps first said to change a field (a field's own step says
    # what the generic "Change /x: reason." said, and more), else before the step that sends
    # the request again: a plan fixes first, then sends
    changes = tuple(f"Change {item['field']}:" for item in fields) or ("\0",)
    at = next((n for n, step in enumerate(steps) if step.startswith(changes)), None)
    rest = [step for step in steps if not step.startswith(changes)]
    if at is None:
        at = next((n for n, step in enumerate(rest) if _RESEND.search(step)), len(rest))
    return rest[:at] + fixes + rest[at:]


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
    line = json_bytes({"error": data})
    for raw, escaped in _JSON_LINE_ESCAPES:
        line = line.replace(raw, escaped)
    if markdown:
        for raw, escaped in _JSON_MD_ESCAPES:
            line = line.replace(raw, escaped)
    return line


def render_prose(envelope: Envelope, style: _Style, tool: str | None = None) -> bytes:
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
