"""The variables a rule's templates name, resolved for one exchange; the upstream's own message."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy.policy.envelope import upstream_detail as detail
from proxy.policy.exchange import Exchange
from proxy.policy.protocols import arguments
from proxy.policy.regex import deferred
from proxy.policy.shorten import shortened

#: Template variables read straight off the exchange (``protocol``, ``rpc_method``, ``tool``: what
#: the agent's call was, from proxy/policy/protocols; ``None`` on plain HTTP).
_EXCHANGE_VARIABLES = frozenset(
    {"method", "path", "route", "request_id", "protocol", "rpc_method", "tool"}
)


#: The SDKs' prefix on a tool's own error text ("Error executing tool NAME: ").
_TOOL_PREFIX = "Error executing tool "
#: Characters of a tool's text a template reads (``tool_message``).
TOOL_MESSAGE_MAX = 2000


def tool_message(exchange: Exchange) -> str | None:
    """An MCP tool's error text without the SDK's "Error executing tool NAME: " prefix; ``None``
    when it is empty. Its lines stay lines (each on one line, at most ``TOOL_MESSAGE_MAX`` in
    all): redaction drops a traceback's lines whole and cuts at a line's end, where one line
    would lose the clause before the trace ("could not write to ..."); the envelope's text is
    one line once scrubbed (``build``)."""
    text = exchange.text.strip()
    if text.startswith(_TOOL_PREFIX):
        _, sep, rest = text.partition(": ")
        text = rest.strip() if sep else ""
    lines = (" ".join(line.split()) for line in text[: TOOL_MESSAGE_MAX * 2].splitlines())
    kept = "\n".join(line for line in lines if line)
    return shortened(kept, TOOL_MESSAGE_MAX, tidy=True) if kept else None


def operation(exchange: Exchange) -> str:
    """What the agent sent, as a hint names it: an MCP tool call, a JSON-RPC call, a GraphQL
    request, or the HTTP method and path (the template variable ``operation``)."""
    if exchange.tool is not None:
        return f"the {exchange.tool[:128]} tool call"
    if exchange.rpc_method is not None:
        return f"the JSON-RPC call {exchange.rpc_method[:128]}"
    if exchange.protocol == "graphql":
        return "the GraphQL request"
    return f"{exchange.method} {exchange.path}"


@dataclass(slots=True)
class Lookup:
    """Resolves template variables for one exchange; computed values are cached."""

    exchange: Exchange
    found: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)

    def __call__(self, name: str) -> Any:
        if name in self.found:
            return self.found[name]
        if name in self.extra:
            return self.extra[name]
        ex = self.exchange
        if name.startswith(("headers.", "request_headers.")):  # the name after the first dot
            source = ex.headers if name[0] == "h" else ex.request_headers
            return source.get(name.partition(".")[2])
        if name in ("status", "upstream_status"):
            return ex.status
        compute = _COMPUTED.get(name)
        if compute is not None:
            self.extra[name] = value = compute(ex)
            return value
        return getattr(ex, name, None) if name in _EXCHANGE_VARIABLES else None


def _argument(exchange: Exchange) -> tuple[Any, Any]:
    """The MCP tool argument an error names and its value (``protocols/arguments.py``)."""
    return arguments.named(exchange.arguments, exchange.text) or (None, None)


def single_line(text: Any, limit: int = 500) -> str:
    """``text`` on one line (every run of whitespace one space), at most ``limit`` long."""
    # str.split() and re's \s both split at str.isspace(): the same as \s+ -> " " and a strip
    value = " ".join(str(text).split())
    return shortened(value, limit, tidy=True)


#: The keys APIs put their message under, the likeliest first: OAuth's ``error_description``
#: before its ``error`` code, WeChat-style ``errmsg``, problem details' ``detail`` before its
#: ``title``, and ``reason`` last (often a token: Kubernetes' "Invalid", Google's "required").
_MESSAGE_KEYS = (
    "message",
    "error_description",
    "errmsg",
    "error_message",
    "errorMessage",
    "detail",
    "title",
    "error",
    "msg",
    "description",
    "reason",
)


def _message_from_json(doc: Any) -> str | None:
    if isinstance(doc, str):
        return doc
    if not isinstance(doc, dict):
        return None
    for key in _MESSAGE_KEYS:
        value = doc.get(key)
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, dict) and (inner := _message_from_json(value)):
            return inner
    errors = doc.get("errors")
    if isinstance(errors, list) and errors:
        return _message_from_json(errors[0])
    return None


#: RE2: ``[^>]*`` restarts at every ``<title`` of a body, so ``re`` took time quadratic in it.
#: ``re.I`` folds i with U+0130 and U+0131 (Turkish i), RE2 does not: spelled out, same match.
_HTML_TITLE = deferred(r"(?i)<(?:t[i\x{130}\x{131}]tle|h1)[^>]*>([^<]{1,300})<")


#: RE2: an XML error's first message, detail, description, reason or faultstring element (any
#: namespace prefix), its text up to 300 characters.
_XML_MESSAGE = deferred(
    r"<(?:[\w.-]{1,64}:)?(?i:message|detail|description|reason|faultstring|title)"
    r"(?:\s[^>]{0,512})?>([^<]{1,300})<"
)


def upstream_message(exchange: Exchange) -> str | None:
    """The upstream's own one-line description of the error, found without a rule."""
    if exchange.is_json:
        message = _message_from_json(exchange.json)
        if (message is None or detail.is_token(message)) and (
            found := detail.structured(exchange.json, exchange.status)
        ) is not None:
            # {"detail": {"error": "item_locked", "lock_holder": ...}}: not just "item_locked"
            message = detail.summary(found) or message
    elif "html" in exchange.content_type or exchange.text.lstrip()[:1] == "<":
        message = detail.html_description(exchange.text, exchange.status)
        if message is None and "html" not in exchange.content_type:
            # an XML error document: its first message-like element (issue 27)
            match = _XML_MESSAGE.search(exchange.text)
            message = ((match.group(1) or "").strip() if match else "") or None
        if message is None:
            match = _HTML_TITLE.search(exchange.text)
            message = match.group(1) if match else None
    else:
        message = exchange.text.strip().split("\n", 1)[0] if exchange.text.strip() else None
    return single_line(message) if message else None


#: Variables computed from the exchange once, when a template first names one.
_COMPUTED: dict[str, Callable[[Exchange], Any]] = {
    "upstream_message": upstream_message,
    "tool_message": tool_message,
    "operation": operation,
    "argument": lambda ex: _argument(ex)[0],
    "argument_value": lambda ex: _argument(ex)[1],
}
