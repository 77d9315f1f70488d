"""From a matched rule and what it found to the envelope an agent receives.

``CompiledEnvelope`` (``compiled_envelope.py``) is a rule's ``envelope:`` block with every
template parsed at load. ``build`` fills it from the exchange (``variables.py``), derives what the
rule left out (action from category, severity from action, steps from action), reads when to
retry and which fields were invalid (``invalid_fields.py``), and runs every substituted value
through the redactor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.policy.envelope import constraints, invalid_fields
from proxy.policy.envelope import upstream_detail as detail
from proxy.policy.envelope.model import Action, Category, Envelope, InvalidField, made, revised
from proxy.policy.envelope.scrubber import recalled
from proxy.policy.envelope.variables import (
    Lookup,
    operation,
    single_line,
    tool_message,
    upstream_message,
)
from proxy.policy.exchange import Exchange
from proxy.policy.regex import deferred
from proxy.policy.retry.resend import (
    AMBIGUOUS_STATUSES,
    KEY_SENTENCE,
    Resend,
    check_first,
    keyed_steps,
    resend,
)
from proxy.policy.retry.retry import clamp, retry_after_ms
from proxy.policy.retry.stated_wait import stated_wait_ms
from proxy.policy.rules.compiled_envelope import DEFAULT_ACTION, CompiledEnvelope
from proxy.policy.rules.template import render_value, scrub_value

__all__ = [
    "DEFAULT_ACTION",
    "BuildOptions",
    "CompiledEnvelope",
    "build",
    "tool_message",
    "upstream_message",
]

Scrub = Callable[[str], str]

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
_WARN = (
    "The first attempt may already have taken effect: check its outcome before sending it again."
)


@dataclass(slots=True)
class BuildOptions:
    """What the operator configured that shapes every envelope."""

    retry_after_default_ms: int = 1000
    retry_after_max_ms: int = 3_600_000
    docs_base_url: str = ""


#: The longest body whose envelope ``build`` remembers (its JSON document is held to
#: ``scrubber.DOCUMENT_MAX`` as well).
_BUILT_TEXT_MAX = 16_384


#: What reads the clock and the request's headers, decided before the rest: the action, whether
#: it is a retry, whether sending it again is safe, and how long to wait (``_retry``).
_Retry = tuple[Action, bool, Resend, int | None]


def _retry(
    compiled: CompiledEnvelope,
    exchange: Exchange,
    lookup: Lookup,
    scrub: Scrub,
    options: BuildOptions,
) -> _Retry:
    action = compiled.action
    retryable = action is Action.RETRY
    # sent, no usable answer (or one saying the effect is unknown): the method or the tool
    # decides whether a retry is safe
    unknown = exchange.applied == "unknown" or compiled.spec.applied == "unknown"
    again = (
        resend(exchange.method, exchange.request_headers, exchange.retry_safe)
        if retryable and (unknown or exchange.status in AMBIGUOUS_STATUSES)
        else Resend.SAFE
    )
    if again is Resend.UNSAFE and unknown:
        action, retryable = Action.ESCALATE, False
    wait = (
        _wait(render_value(compiled.retry_after_ms, lookup, scrub), exchange, options)
        if retryable
        else None
    )
    return action, retryable, again, wait


def build(
    compiled: CompiledEnvelope,
    exchange: Exchange,
    found: dict[str, Any],
    scrub: Scrub,
    options: BuildOptions,
) -> Envelope:
    """The envelope of ``compiled``'s rule for ``exchange``, given what its conditions ``found``;
    every value from the upstream through ``scrub``.

    An envelope built before for the same response, request line, values found, options and
    retry decision (``_retry``: the wait, whether a resend is safe), scrubbed by the same
    remembering redactor, is given again from the rule's memory with this request's id
    (``scrubber.recalled``), unless the rule's templates read more than that (``live``).
    """
    lookup = Lookup(exchange, found)
    decided = _retry(compiled, exchange, lookup, scrub, options)
    if (
        compiled.live
        or len(exchange.text) > _BUILT_TEXT_MAX
        or not compiled.built.probation.worth()  # resting: no key made (``memo.py``)
    ):
        return _build(compiled, exchange, scrub, options, lookup, decided)
    document = exchange.written() if exchange.is_json else b""
    try:
        values = orjson.dumps(found)
    except (orjson.JSONEncodeError, TypeError):
        return _build(compiled, exchange, scrub, options, lookup, decided)
    about = (
        exchange.status,
        exchange.method,
        exchange.path,
        exchange.route,
        exchange.content_type,
        exchange.protocol,
        exchange.rpc_method,
        exchange.tool,
        exchange.applied,
        exchange.destructive,
        exchange.text,
        values,
        decided[0].value,  # the enums' values: a member hashes in Python, its str in C
        decided[1],
        decided[2].value,
        decided[3],
        options.retry_after_default_ms,
        options.retry_after_max_ms,
        options.docs_base_url,
    )
    envelope = recalled(
        compiled.built,
        scrub,
        about,
        document,
        lambda: _build(compiled, exchange, scrub, options, lookup, decided),
        len(exchange.text) + len(exchange.path) + len(values),
    )
    # a copy each time, remembered or not: envelopes are told apart by identity (a batch's
    # errors reviewed one by one, ``envelope_steps._put_back``)
    return revised(envelope, {"request_id": exchange.request_id})


def _build(
    compiled: CompiledEnvelope,
    exchange: Exchange,
    scrub: Scrub,
    options: BuildOptions,
    lookup: Lookup,
    decided: _Retry,
) -> Envelope:
    def render(value: Any) -> Any:
        return render_value(value, lookup, scrub)

    def text(value: Any) -> str | None:
        rendered = render(value)
        return _filled(rendered) if rendered not in (None, "") else None

    spec = compiled.spec
    action, retryable, again, wait = decided

    invalid = (
        invalid_fields.written(compiled.invalid_fields, render, scrub)
        if isinstance(compiled.invalid_fields, list)
        else invalid_fields.found(compiled.invalid_fields, exchange, scrub)
    )
    field_pointer = text(compiled.field) or (invalid[0].field if invalid else None)
    op = operation(exchange)
    message = text(compiled.message) or _DEFAULT_MESSAGE[spec.category].format(op=op)
    if not invalid and field_pointer is not None:
        # a rule naming one field (``field: "/{{ param }}"``) names one invalid field
        invalid = [invalid_fields.named(field_pointer, message, scrub)]
    allowed = render(compiled.allowed_values)
    suggested = render(compiled.suggested_value)
    # the primary field (the one `field` names) lends its constraints to the top level
    primary = next((f for f in invalid if f.field == field_pointer), None)
    if allowed is None and primary is not None:
        allowed = primary.allowed_values
    if suggested is None and primary is not None:
        suggested = primary.suggested_value
    if suggested is None and isinstance(allowed, dict):
        suggested = constraints.suggest(allowed, primary.received if primary else None)
    if primary is not None and primary.suggested_value is None and suggested is not None:
        # the field and the top level suggest one value, never one each
        invalid[invalid.index(primary)] = revised(primary, {"suggested_value": suggested})

    next_operation = text(compiled.next_operation)
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
    #: what the default hint and steps say
    said = {"wait": wait, "op": op, "next": next_operation or _NAMED_OPERATION}
    hint = text(compiled.hint)
    if hint is None or _cites(hint, empty):
        hint = (UNSAID_HINT if unsaid else DEFAULT_HINT[action]).format(**said)
    written = _written_steps(render(compiled.steps), empty) if compiled.steps is not None else []
    steps = written or _default_steps(action, said, invalid, unsaid=unsaid)
    if again is not Resend.SAFE:
        hint, steps = _resent(again, retryable, (hint, steps), exchange)

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
            "upstream_detail": _upstream_detail(compiled, exchange, scrub),
            "docs_url": f"{options.docs_base_url}/_mend/errors/{spec.code}",
            "request_id": exchange.request_id,
            "upstream_status": exchange.status,
            "rule": compiled.rule,
            "applied": exchange.applied or spec.applied,
        },
    )


def _wait(from_rule: Any, exchange: Exchange, options: BuildOptions) -> int:
    """How long a retryable error says to wait: the rule's, the upstream's ``Retry-After`` (or
    rate-limit headers), what its body says, else the default; capped."""
    wait = _int(from_rule)
    if wait is None:
        wait = retry_after_ms(exchange.headers)
    if wait is None:
        wait = stated_wait_ms(exchange)  # a body that says when, whatever rule matched
    return clamp(
        options.retry_after_default_ms if wait is None else wait, options.retry_after_max_ms
    )


#: RE2: parentheses a template left empty ("unavailable ({{ message }})" of a message the
#: redactor removed whole), with the space before them.
_EMPTY_PARENS = deferred(r"\s*\(\s*\)")


def _filled(rendered: Any) -> str:
    """A rendered sentence on one line, without the parentheses an empty value left."""
    return single_line(_EMPTY_PARENS.sub("", single_line(rendered)))


def _written_steps(rendered: Any, empty: tuple[str, ...]) -> list[str]:
    """A rule's own steps, one line each; none when one cites a field the envelope leaves
    empty (the default steps then stand)."""
    written = [_filled(s) for s in rendered if s] if isinstance(rendered, list) else []
    return [] if any(_cites(s, empty) for s in written) else written


def _resent(
    again: Resend, retryable: bool, guidance: tuple[str, list[str]], exchange: Exchange
) -> tuple[str, list[str]]:
    """The hint and steps, told whether sending the request again is safe: with an
    idempotency key, after checking the first attempt's outcome, or not at all."""
    hint, steps = guidance
    if again is Resend.KEYED:
        return f"{hint} {KEY_SENTENCE}", keyed_steps(steps)
    if again is Resend.UNSAFE and retryable:  # the upstream's gateway answered 502 or 504
        return f"{hint} {_WARN}", [_WARN, *steps]
    if again is Resend.UNSAFE:
        return check_first(
            operation(exchange), tool=exchange.tool is not None, destructive=exchange.destructive
        )
    return hint, steps


def _empty_fields(**values: Any) -> tuple[str, ...]:
    """The names of the envelope fields among ``values`` that are null or empty."""
    return tuple(name for name, value in values.items() if value is None or value in ("", [], {}))


def _cites(text: str, names: tuple[str, ...]) -> bool:
    return any(name in text for name in names)


def _upstream_detail(compiled: CompiledEnvelope, exchange: Exchange, scrub: Scrub) -> Any:
    """The upstream's small structured detail, redacted, for rules that keep it (fallbacks);
    a document seen before answered from the rule's memory (``scrubber.recalled``)."""
    spec = compiled.spec
    if not spec.upstream_detail or not exchange.is_json:
        return None

    def make() -> Any:
        found = detail.structured(exchange.json, exchange.status)
        return None if found is None else scrub_value(found, scrub)

    made_ = recalled(compiled.details, scrub, exchange.status, exchange.written(), make)
    return dict(made_) if isinstance(made_, dict) else made_  # scalars: a copy is a deep one


def _int(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return round(float(value))
    except (TypeError, ValueError):
        return None


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
    Category.UNCLASSIFIED: "{op} failed.",
}


#: The steps of each action but ``fix_request`` (``_fix_steps``) when a rule writes none.
_DEFAULT_STEPS: dict[Action, tuple[str, str]] = {
    Action.RETRY: ("Wait {wait} ms.", "Send {op} again unchanged."),
    Action.CALL_OTHER_OPERATION: ("Call {next} first.", "Send {op} again."),
    Action.REAUTHENTICATE: (
        "Obtain a new access token or credentials.",
        "Send {op} again with them.",
    ),
    Action.ESCALATE: ("Do not retry {op}.", "Tell the user what failed and what is needed."),
    Action.REPORT_BUG: ("Do not retry {op} unchanged.", "Report the error with its request_id."),
}
_NAMED_OPERATION = "the operation the message names"


def _default_steps(
    action: Action, said: dict[str, Any], invalid: list[InvalidField], *, unsaid: bool
) -> list[str]:
    """The steps of ``action`` when the rule wrote none (or none that stand)."""
    if action is Action.FIX_REQUEST:
        return _fix_steps(str(said["op"]), invalid, unsaid=unsaid)
    return [step.format(**said) for step in _DEFAULT_STEPS[action]]


def _named(field: InvalidField) -> str:
    """A field as a step names it: its pointer, or for the root pointer the whole location."""
    return field.field or f"the {field.location or 'request'} as a whole"


def _fix_steps(operation: str, invalid: list[InvalidField], *, unsaid: bool) -> list[str]:
    """``fix_request``'s steps: one per invalid field, else what to check, then send again."""
    fixes = [f"Change {_named(f)}: {f.reason.rstrip('.')}." for f in invalid]
    if not fixes:
        fixes = [
            f"Check the request against what the API documents for {operation}."
            if unsaid
            else "Change the request as the message says."
        ]
    return [*fixes, f"Send {operation} again."]
