"""From a matched rule and what it found to the envelope an agent receives.

``CompiledEnvelope`` is a rule's ``envelope:`` block with every template parsed at load. ``build``
fills it from the exchange, derives what the rule left out (action from category, severity from
action, steps from action), reads when to retry, and runs every substituted value through the
redactor. The Envelope model then checks the invariants.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy.policy import constraints
from proxy.policy import upstream_detail as detail
from proxy.policy.envelope import Action, Category, Envelope, InvalidField, Severity, made
from proxy.policy.exchange import Exchange
from proxy.policy.pointer import to_pointer
from proxy.policy.protocols import arguments
from proxy.policy.regex import linear
from proxy.policy.resend import KEY_SENTENCE, Resend, check_first, keyed_steps, resend
from proxy.policy.retry import clamp, retry_after_ms
from proxy.policy.rulefile import EnvelopeSpec, InvalidFieldsSpec, compile_jmespath
from proxy.policy.stated_wait import stated_wait_ms
from proxy.policy.template import Template, compile_value, render_value, scrub_value

Scrub = Callable[[str], str]

DEFAULT_ACTION: dict[Category, Action] = {
    Category.VALIDATION: Action.FIX_REQUEST,
    Category.AUTH: Action.REAUTHENTICATE,
    Category.PERMISSION: Action.ESCALATE,
    Category.NOT_FOUND: Action.FIX_REQUEST,
    Category.CONFLICT: Action.FIX_REQUEST,
    Category.PRECONDITION: Action.FIX_REQUEST,
    Category.RATE_LIMIT: Action.RETRY,
    Category.UNAVAILABLE: Action.RETRY,
    Category.TIMEOUT: Action.RETRY,
    Category.INTERNAL: Action.REPORT_BUG,
    Category.PAYLOAD_TOO_LARGE: Action.FIX_REQUEST,
    Category.UNSUPPORTED_MEDIA: Action.FIX_REQUEST,
    Category.METHOD_NOT_ALLOWED: Action.FIX_REQUEST,
    Category.DEPENDENCY: Action.RETRY,
}

DEFAULT_HINT: dict[Action, str] = {
    Action.RETRY: "Wait {wait} ms, then send {op} again unchanged.",
    Action.FIX_REQUEST: "Change the request as the message says, then send {op} again.",
    Action.CALL_OTHER_OPERATION: "Call {next} first, then send {op} again.",
    Action.REAUTHENTICATE: "Obtain fresh credentials, then send {op} again with them.",
    Action.ESCALATE: "Do not retry {op}; tell the user what failed and ask them to resolve it.",
    Action.REPORT_BUG: "Do not retry {op} unchanged; report this error with its request id.",
}

#: ``fix_request``'s hint when the upstream said nothing a fix could follow (no message, no field)
UNSAID_HINT = (
    "Check the fields, types and allowed values the API documents for {op} (it did not say what "
    "is wrong), correct the request, then send it again."
)
#: An upstream's gateway answered that it got no answer: the request may have taken effect.
_AMBIGUOUS_STATUSES = frozenset({502, 504})
_WARN = (
    "The first attempt may already have taken effect: check its outcome before sending it again."
)


def _compile_optional(value: str | None) -> Template | str | None:
    if value is None:
        return None
    compiled = compile_value(value)
    return compiled if isinstance(compiled, Template | str) else str(compiled)


@dataclass(frozen=True, slots=True)
class CompiledInvalidFields:
    each: Any
    field: Any
    reason: Any
    received: Any
    allowed_values: Any
    strip: tuple[str, ...]
    camel: bool

    @classmethod
    def compile(cls, spec: InvalidFieldsSpec) -> CompiledInvalidFields:
        def query(q: str | None) -> Any:
            return compile_jmespath(q) if q is not None else None

        return cls(
            query(spec.each),
            query(spec.field),
            query(spec.reason),
            query(spec.received),
            query(spec.allowed_values),
            spec.strip,
            spec.field_case == "camel",
        )

    def items(self, document: Any) -> list[tuple[Any, Any, Any, Any]]:
        """(location, reason, received, allowed) per offending field, in the upstream's order."""
        found = self.each.search(document)
        if isinstance(found, dict):
            return [(path, reason, None, None) for path, reason in _leaves(found, ())]
        if not isinstance(found, list):
            return []
        out = []
        for item in found:

            def get(query: Any, item: Any = item) -> Any:
                return query.search(item) if query is not None else None

            location = get(self.field) if self.field is not None else item
            out.append((location, get(self.reason), get(self.received), get(self.allowed_values)))
        return out


def _leaves(node: Any, path: tuple[Any, ...]) -> list[tuple[tuple[Any, ...], str]]:
    """Flatten ``{"items": [{"qty": ["too small"]}]}`` to ``[(("items", 0, "qty"), "too small")]``.

    DRF, Rails and Laravel nest field errors in objects rather than listing them.
    """
    if isinstance(node, dict):
        return [leaf for k, v in node.items() for leaf in _leaves(v, (*path, k))]
    if isinstance(node, list) and node and all(isinstance(v, str) for v in node):
        return [(path, " ".join(node))]
    if isinstance(node, list):
        return [leaf for i, v in enumerate(node) for leaf in _leaves(v, (*path, i))]
    return [(path, str(node))]


def _compile_invalid_fields(
    spec: EnvelopeSpec,
) -> CompiledInvalidFields | list[dict[str, Any]] | None:
    if isinstance(spec.invalid_fields, InvalidFieldsSpec):
        return CompiledInvalidFields.compile(spec.invalid_fields)
    if spec.invalid_fields:
        return [compile_value(item.model_dump()) for item in spec.invalid_fields]
    return None


@dataclass(frozen=True, slots=True)
class CompiledEnvelope:
    spec: EnvelopeSpec
    action: Action
    severity: Severity
    message: Any
    hint: Any
    steps: Any
    field: Any
    invalid_fields: CompiledInvalidFields | list[dict[str, Any]] | None
    allowed_values: Any
    suggested_value: Any
    next_operation: Any
    next_operation_args: Any
    retry_after_ms: Any

    @classmethod
    def compile(cls, spec: EnvelopeSpec) -> CompiledEnvelope:
        action = spec.action or DEFAULT_ACTION[spec.category]
        severity = spec.severity or (
            Severity.FATAL if action in (Action.ESCALATE, Action.REPORT_BUG) else Severity.ERROR
        )
        return cls(
            spec=spec,
            action=action,
            severity=severity,
            message=_compile_optional(spec.message),
            hint=_compile_optional(spec.hint),
            steps=compile_value(spec.steps) if spec.steps else None,
            field=_compile_optional(spec.field),
            invalid_fields=_compile_invalid_fields(spec),
            allowed_values=compile_value(spec.allowed_values),
            suggested_value=compile_value(spec.suggested_value),
            next_operation=_compile_optional(spec.next_operation),
            next_operation_args=compile_value(spec.next_operation_args),
            retry_after_ms=compile_value(spec.retry_after_ms),
        )


@dataclass(slots=True)
class BuildOptions:
    """What the operator configured that shapes every envelope."""

    retry_after_default_ms: int = 1000
    retry_after_max_ms: int = 3_600_000
    docs_base_url: str = ""


#: Template variables read straight off the exchange (``protocol``, ``rpc_method``, ``tool``: what
#: the agent's call was, from proxy/policy/protocols; ``None`` on plain HTTP).
_EXCHANGE_VARIABLES = frozenset(
    {"method", "path", "route", "request_id", "protocol", "rpc_method", "tool"}
)


#: The MCP tool argument an error names and its value (``proxy/policy/protocols/arguments.py``).
_ARGUMENT_VARIABLES = frozenset({"argument", "argument_value"})
#: The SDKs' prefix on a tool's own error text ("Error executing tool NAME: ").
_TOOL_PREFIX = "Error executing tool "


def tool_message(exchange: Exchange) -> str | None:
    """An MCP tool's error text without the SDK's "Error executing tool NAME: " prefix, on one
    line; ``None`` when it is empty."""
    text = exchange.text.strip()
    if text.startswith(_TOOL_PREFIX):
        _, sep, rest = text.partition(": ")
        text = rest.strip() if sep else ""
    return _single_line(text) if text else None


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
        if name.startswith("headers."):
            return ex.headers.get(name[8:])
        if name.startswith("request_headers."):
            return ex.request_headers.get(name[16:])
        if name in ("status", "upstream_status"):
            return ex.status
        if name == "upstream_message":
            self.extra[name] = message = upstream_message(ex)
            return message
        if name in _ARGUMENT_VARIABLES:
            found = arguments.named(ex.arguments, ex.text)
            self.extra["argument"], self.extra["argument_value"] = found or (None, None)
            return self.extra[name]
        if name == "tool_message":
            self.extra[name] = message = tool_message(ex)
            return message
        return getattr(ex, name, None) if name in _EXCHANGE_VARIABLES else None


def _single_line(text: Any, limit: int = 500) -> str:
    # str.split() and re's \s both split at str.isspace(): the same as \s+ -> " " and a strip
    value = " ".join(str(text).split())
    return value if len(value) <= limit else value[: limit - 1].rstrip() + "…"


def _message_from_json(doc: Any) -> str | None:
    if isinstance(doc, str):
        return doc
    if not isinstance(doc, dict):
        return None
    for key in ("message", "error_description", "detail", "title", "error", "msg", "description"):
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
_HTML_TITLE = linear(r"(?i)<(?:t[i\x{130}\x{131}]tle|h1)[^>]*>([^<]{1,300})<")


#: RE2: an XML error's first message, detail, description, reason or faultstring element (any
#: namespace prefix), its text up to 300 characters.
_XML_MESSAGE = linear(
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
    return _single_line(message) if message else None


def _operation(exchange: Exchange) -> str:
    """What the agent sent, as a hint names it: an MCP tool call, a JSON-RPC call, a GraphQL
    request, or the HTTP method and path."""
    if exchange.tool is not None:
        return f"the {exchange.tool[:128]} tool call"
    if exchange.rpc_method is not None:
        return f"the JSON-RPC call {exchange.rpc_method[:128]}"
    if exchange.protocol == "graphql":
        return "the GraphQL request"
    return f"{exchange.method} {exchange.path}"


def build(
    compiled: CompiledEnvelope,
    rule_id: str,
    exchange: Exchange,
    found: dict[str, Any],
    scrub: Scrub,
    options: BuildOptions,
) -> Envelope:
    lookup = Lookup(exchange, found)

    def render(value: Any) -> Any:
        return render_value(value, lookup, scrub)

    def text(value: Any) -> str | None:
        rendered = render(value)
        return _single_line(rendered) if rendered not in (None, "") else None

    spec = compiled.spec
    action = compiled.action
    retryable = action is Action.RETRY
    # sent, no usable answer: the method (or the tool) decides whether a retry is safe
    again = (
        resend(exchange.method, exchange.request_headers, exchange.retry_safe)
        if retryable and (exchange.applied == "unknown" or exchange.status in _AMBIGUOUS_STATUSES)
        else Resend.SAFE
    )
    if again is Resend.UNSAFE and exchange.applied == "unknown":
        action, retryable = Action.ESCALATE, False
    wait: int | None = None
    if retryable:
        from_rule = render(compiled.retry_after_ms)
        wait = _int(from_rule)
        if wait is None:
            wait = retry_after_ms(exchange.headers)
        if wait is None:
            wait = stated_wait_ms(exchange)  # a body that says when, whatever rule matched
        wait = clamp(
            options.retry_after_default_ms if wait is None else wait, options.retry_after_max_ms
        )

    invalid = (
        _written_invalid_fields(compiled.invalid_fields, render, scrub)
        if isinstance(compiled.invalid_fields, list)
        else _invalid_fields(compiled.invalid_fields, exchange, scrub)
    )
    field_pointer = text(compiled.field) or (invalid[0].field if invalid else None)
    allowed = render(compiled.allowed_values)
    suggested = render(compiled.suggested_value)
    # the primary field (the one `field` names) lends its constraints to the top level
    primary = next((f for f in invalid if f.field == field_pointer), None)
    if allowed is None and primary is not None:
        allowed = primary.allowed_values
    if suggested is None and isinstance(allowed, dict):
        suggested = constraints.suggest(allowed, primary.received if primary else None)

    next_operation = text(compiled.next_operation)
    operation = _operation(exchange)
    message = text(compiled.message) or _default_message(spec.category, exchange, lookup)
    # a fix "as the message says" needs a message that says something: a rule whose message is
    # the upstream's own words (or none) on a response that had none says nothing
    unsaid = (
        action is Action.FIX_REQUEST
        and not invalid
        and "upstream_message" in (spec.message or "upstream_message")
        and not lookup("upstream_message")
    )
    args = render(compiled.next_operation_args)
    # a hint or step never points the agent at a field the envelope leaves empty
    empty = _empty_fields(
        allowed_values=allowed,
        suggested_value=suggested,
        invalid_fields=invalid,
        next_operation=next_operation,
        next_operation_args=args,
        retry_after_ms=wait,
    )
    hint = text(compiled.hint)
    if hint is None or _cites(hint, empty):
        hint = (
            UNSAID_HINT.format(op=operation)
            if unsaid
            else DEFAULT_HINT[action].format(
                wait=wait, op=operation, next=next_operation or "the operation the message names"
            )
        )
    rendered_steps = render(compiled.steps) if compiled.steps is not None else None
    written = (
        [_single_line(s) for s in rendered_steps if s] if isinstance(rendered_steps, list) else []
    )
    steps = (
        written
        if written and not any(_cites(s, empty) for s in written)
        else _default_steps(action, operation, wait, invalid, next_operation, unsaid=unsaid)
    )
    if again is Resend.KEYED:
        hint = f"{hint} {KEY_SENTENCE}"
        steps = keyed_steps(steps)
    elif again is Resend.UNSAFE and retryable:  # the upstream's gateway answered 502 or 504
        hint = f"{hint} {_WARN}"
        steps = [_WARN, *steps]
    elif again is Resend.UNSAFE:
        hint, steps = check_first(
            operation, tool=exchange.tool is not None, destructive=exchange.destructive
        )

    # every field is mend's own, of its declared type: made, not validated again (issue 29)
    return made(
        Envelope,
        {
            "code": spec.code,
            "message": message,
            "category": spec.category,
            "severity": compiled.severity,
            "retryable": retryable,
            "retry_after_ms": wait,
            "action": action,
            "hint": hint,
            "steps": tuple(steps),
            "field": field_pointer,
            "invalid_fields": tuple(invalid),
            "allowed_values": allowed,
            "suggested_value": suggested,
            "next_operation": next_operation,
            "next_operation_args": args,
            "related_codes": tuple(spec.related_codes),
            "upstream_detail": _upstream_detail(spec, exchange, scrub),
            "docs_url": f"{options.docs_base_url}/_mend/errors/{spec.code}",
            "request_id": exchange.request_id,
            "upstream_status": exchange.status,
            "rule": rule_id,
            "applied": exchange.applied,
        },
    )


def _empty_fields(**values: Any) -> tuple[str, ...]:
    """The names of the envelope fields among ``values`` that are null or empty."""
    return tuple(name for name, value in values.items() if value is None or value in ("", [], {}))


def _cites(text: str, names: tuple[str, ...]) -> bool:
    return any(name in text for name in names)


def _upstream_detail(spec: EnvelopeSpec, exchange: Exchange, scrub: Scrub) -> Any:
    """The upstream's small structured detail, redacted, for rules that keep it (fallbacks)."""
    if not spec.upstream_detail or not exchange.is_json:
        return None
    found = detail.structured(exchange.json, exchange.status)
    return None if found is None else scrub_value(found, scrub)


def _int(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return round(float(value))
    except (TypeError, ValueError):
        return None


def _scrub_pointer(pointer: str, scrub: Scrub) -> str:
    # segment by segment: "/data/attributes/qty" is JSON keys, not a file path to hide
    return "/".join(scrub(segment) if segment else segment for segment in pointer.split("/"))


def _camel(pointer: str) -> str:
    return "/".join(s[:1].lower() + s[1:] if not s.isdigit() else s for s in pointer.split("/"))


def _invalid_field(
    pointer: str, reason: Any, received: Any, context: Any, scrub: Scrub
) -> InvalidField:
    reason_text = _single_line(scrub(str(reason)), 300) if reason else "is invalid"
    allowed = constraints.from_context(context) or constraints.from_reason(reason_text)
    if allowed:
        allowed = constraints.normalise(allowed, received)
    elif context is not None and not isinstance(context, dict):
        allowed = context  # a rule that names the allowed values directly
    return made(
        InvalidField,
        {
            "field": _scrub_pointer(pointer, scrub),
            "reason": reason_text,
            "received": scrub_value(received, scrub),
            "allowed_values": scrub_value(allowed, scrub),
        },
    )


def _written_invalid_fields(
    items: list[dict[str, Any]], render: Callable[[Any], Any], scrub: Scrub
) -> list[InvalidField]:
    out = []
    for item in items:
        rendered = render(item)
        pointer = to_pointer(rendered.get("field"), ())
        if pointer is not None:
            out.append(
                _invalid_field(
                    pointer,
                    rendered.get("reason"),
                    rendered.get("received"),
                    rendered.get("allowed_values"),
                    scrub,
                )
            )
    return out


def _invalid_fields(
    compiled: CompiledInvalidFields | None, exchange: Exchange, scrub: Scrub
) -> list[InvalidField]:
    if compiled is None or not exchange.is_json:
        return []
    out: list[InvalidField] = []
    for location, reason, received, context in compiled.items(exchange.json)[:100]:
        pointer = to_pointer(location, compiled.strip)
        if pointer is None:
            continue
        if compiled.camel:
            pointer = _camel(pointer)
        out.append(_invalid_field(pointer, reason, received, context, scrub))
    return out


_DEFAULT_MESSAGE: dict[Category, str] = {
    Category.VALIDATION: "The request to {op} was rejected as invalid.",
    Category.AUTH: "The request to {op} was not authenticated.",
    Category.PERMISSION: "The caller is not allowed to perform {op}.",
    Category.NOT_FOUND: "The resource addressed by {op} was not found.",
    Category.CONFLICT: "{op} conflicts with the current state of the resource.",
    Category.PRECONDITION: "A precondition of {op} was not met.",
    Category.RATE_LIMIT: "Too many requests: {op} was rate limited.",
    Category.UNAVAILABLE: "The upstream service is unavailable for {op}.",
    Category.TIMEOUT: "{op} timed out.",
    Category.INTERNAL: "The upstream service failed while handling {op}.",
    Category.PAYLOAD_TOO_LARGE: "The request body sent to {op} is too large.",
    Category.UNSUPPORTED_MEDIA: "The content type sent to {op} is not supported.",
    Category.METHOD_NOT_ALLOWED: "{op} is not allowed on this resource.",
    Category.DEPENDENCY: "A service that {op} depends on failed.",
}


def _default_message(category: Category, exchange: Exchange, lookup: Lookup) -> str:
    return _DEFAULT_MESSAGE[category].format(op=_operation(exchange))


def _default_steps(
    action: Action,
    operation: str,
    wait: int | None,
    invalid: list[InvalidField],
    next_operation: str | None,
    *,
    unsaid: bool = False,
) -> list[str]:
    if action is Action.RETRY:
        return [f"Wait {wait} ms.", f"Send {operation} again unchanged."]
    if action is Action.FIX_REQUEST:
        fixes = [f"Change {f.field}: {f.reason.rstrip('.')}." for f in invalid]
        return [
            *(
                fixes
                or [
                    f"Check the request against what the API documents for {operation}."
                    if unsaid
                    else "Change the request as the message says."
                ]
            ),
            f"Send {operation} again.",
        ]
    if action is Action.CALL_OTHER_OPERATION:
        return [
            f"Call {next_operation or 'the operation the message names'} first.",
            f"Send {operation} again.",
        ]
    if action is Action.REAUTHENTICATE:
        return ["Obtain a new access token or credentials.", f"Send {operation} again with them."]
    if action is Action.ESCALATE:
        return [f"Do not retry {operation}.", "Tell the user what failed and what is needed."]
    return [f"Do not retry {operation} unchanged.", "Report the error with its request_id."]
