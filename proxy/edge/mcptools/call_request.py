"""A tool call's arguments as the HTTP request of its operation (the reverse of
``tools.py``'s merge).

Path parameters fill the template (percent-encoded), query parameters become the query (arrays
repeated when ``explode``, else comma-joined), header parameters headers, and body properties one
JSON object (or the ``body`` argument as the whole body). ``null`` is an absent argument.
What HTTP cannot carry is a ``Violation`` here, in the request's terms (a missing path
parameter, an argument the tool does not have); the rest is checked by the route's document on
the request itself, as for any agent (``proxy/edge/openapi_gate.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

import orjson

from proxy.edge.mcptools.tools import Argument, ToolSpec
from proxy.policy.openapi.spec import Mount, Spec
from proxy.policy.openapi.violations import Violation, echo

#: What a missing path parameter is sent as, so the path still names the operation; the
#: request never leaves mend (the missing parameter is a violation).
PLACEHOLDER = "-"
#: Characters of a header value mend sends (and no control characters).
MAX_HEADER = 8192


@dataclass(frozen=True, slots=True)
class HttpCall:
    method: str
    target: str  # path and query, as an agent would send them to mend
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes | None = None
    violations: list[Violation] = field(default_factory=list)


def http_call(tool: ToolSpec, arguments: Any, spec: Spec, mount: Mount) -> HttpCall:
    """The request ``arguments`` make for ``tool``'s operation."""
    try:
        return _http_call(tool, arguments, spec, mount)
    except orjson.JSONEncodeError:  # nesting orjson refuses (over 254 levels)
        reason = "the arguments nest too deep to be sent as JSON"
        refused = Violation("", "argument", reason, None, None, None)
        return HttpCall(
            tool.operation.method, spec.agent_path(tool.operation.path, mount), [], None, [refused]
        )


@dataclass
class _Parts:
    """What the arguments fill in of the request, as each is placed."""

    violations: list[Violation]
    path_values: dict[str, str] = field(default_factory=dict)
    query: list[tuple[str, str]] = field(default_factory=list)
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: dict[str, Any] = field(default_factory=dict)
    whole: Any = None


def _http_call(tool: ToolSpec, arguments: Any, spec: Spec, mount: Mount) -> HttpCall:
    operation = tool.operation
    known, violations = _arguments(tool, arguments)
    parts = _Parts(violations)
    for argument in tool.arguments:
        _place(parts, argument, known.get(argument.name), tool)
    path = operation.path
    for key, text in parts.path_values.items():
        path = path.replace("{" + key + "}", text)
    target = spec.agent_path(path, mount)
    if parts.query:
        target += "?" + urlencode(parts.query, quote_via=quote)
    payload = _body(tool, parts.body, parts.whole)
    if payload is not None:
        parts.headers.append(("Content-Type", "application/json"))
    return HttpCall(operation.method, target, parts.headers, payload, parts.violations)


def _arguments(tool: ToolSpec, arguments: Any) -> tuple[Mapping[Any, Any], list[Violation]]:
    """The arguments as a mapping, and a violation for what is not one or not ``tool``'s."""
    violations: list[Violation] = []
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        violations.append(
            Violation("", "body", "the arguments must be a JSON object", echo(arguments), None, {})
        )
        arguments = {}
    for name in arguments:
        if tool.named(str(name)) is None:
            known = [a.name for a in tool.arguments]
            reason = f"is not an argument of {tool.name}"
            allowed = {"enum": known} if known else None
            violations.append(
                Violation(f"/{name}", "argument", reason, echo(arguments[name]), allowed, None)
            )
    return arguments, violations


def _place(parts: _Parts, argument: Argument, value: Any, tool: ToolSpec) -> None:
    """One argument's value where its operation takes it: path, query, header or body."""
    if argument.location == "path":
        parts.path_values[argument.key] = _segment(argument, value, parts.violations)
    elif value is None:
        return
    elif argument.location == "query":
        parts.query.extend(_query(argument.key, value, tool))
    elif argument.location == "header":
        text = _text(value)
        if len(text) > MAX_HEADER or any(ord(c) < 32 and c != "\t" for c in text):
            reason = "must be a header value: one line, at most 8192 characters"
            parts.violations.append(
                Violation(f"/{argument.key}", "header", reason, None, None, None)
            )
        else:
            parts.headers.append((argument.key, text))
    elif argument.key:
        parts.body[argument.key] = value
    else:
        parts.whole = value


def _segment(argument: Argument, value: Any, violations: list[Violation]) -> str:
    """A path parameter's segment, percent-encoded; ``PLACEHOLDER`` and a violation when the
    value is missing or would move the path."""
    if value is None:
        reason = "is a required path parameter"
        violations.append(Violation(f"/{argument.key}", "path", reason, None, None, None))
        return PLACEHOLDER
    if _text(value) in ("", ".", ".."):  # no segment, or one that moves the path
        reason = "must be a path segment: not empty, not . or .."
        violations.append(Violation(f"/{argument.key}", "path", reason, value, None, None))
        return PLACEHOLDER
    return quote(_text(value), safe="")


def _body(tool: ToolSpec, properties: dict[str, Any], whole: Any) -> bytes | None:
    spec = tool.operation.body
    if spec is None:
        return None
    if tool.whole_body:
        if whole is None:
            return b"" if spec.required else None
        return orjson.dumps(whole)
    if not properties and not spec.required:
        return None
    return orjson.dumps(properties)


def _query(name: str, value: Any, tool: ToolSpec) -> list[tuple[str, str]]:
    if isinstance(value, list):
        param = next(
            p for p in tool.operation.parameters if p.name == name and p.location == "query"
        )
        items = [_text(v) for v in value]
        return [(name, v) for v in items] if param.explode else [(name, ",".join(items))]
    return [(name, _text(value))]


def _text(value: Any) -> str:
    """A scalar as HTTP writes it (``true``, ``3``, ``a b``); anything else as JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list) and all(not isinstance(v, list | dict) for v in value):
        return ",".join(_text(v) for v in value)
    return orjson.dumps(value).decode()
