"""Whether a request that may already have taken effect upstream can be sent again.

docs/contract.md §1, "Retry advice and idempotency": when mend sent a request and got no usable
answer (``applied: "unknown"``), the same request again is safe only for an idempotent method (RFC
9110 §9.2.2), for a request carrying an ``Idempotency-Key``
(draft-ietf-httpapi-idempotency-key-header: the API applies one key at most once, so the retry
reuses it), and for what ``proxy/policy/retry/retry_safety.py`` calls safe (``Exchange.retry_safe``:
a route's ``retry_safe:`` override, an MCP tool annotated idempotent or read-only, a POST that only
reads). Anything else may be applied twice: the plan is to check first.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

#: Methods whose repetition has the effect of one request (RFC 9110 §9.2.2).
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE"})
#: draft-ietf-httpapi-idempotency-key-header
KEY_HEADER = "Idempotency-Key"
#: An upstream's gateway answered that it got no answer: the request may have taken effect.
AMBIGUOUS_STATUSES = frozenset({502, 504})


class Resend(Enum):
    SAFE = "safe"  # the same request again has the effect of one
    KEYED = "keyed"  # safe with the same Idempotency-Key value
    UNSAFE = "unsafe"  # may be applied twice: check first


def resend(method: str, request_headers: Mapping[str, str], retry_safe: bool | None) -> Resend:
    """How a request that may have taken effect can be sent again; ``retry_safe`` is what a
    route override or a tool's annotations say (``None``: the method decides)."""
    if retry_safe is True or (retry_safe is None and method in IDEMPOTENT_METHODS):
        return Resend.SAFE
    if request_headers.get(KEY_HEADER, "").strip():
        return Resend.KEYED
    return Resend.UNSAFE


KEY_SENTENCE = (
    "Reuse the same Idempotency-Key header value, so that the API applies it at most once."
)


def keyed_steps(steps: list[str]) -> list[str]:
    """The retry steps of a keyed request: the key kept, before the request is sent again."""
    return [*steps[:-1], KEY_SENTENCE, *steps[-1:]] if steps else [KEY_SENTENCE]


def check_first(operation: str, *, tool: bool, destructive: bool) -> tuple[str, list[str]]:
    """The hint and steps for a request that may have taken effect and must not be repeated
    blindly; ``operation`` as a hint names it (``build._operation``). A ``destructive`` tool
    (MCP's default for one not read-only) has the user asked before it is called again."""
    how = (
        "call a tool that reads what it creates or changes"
        if tool
        else "read the resource it creates or changes (fetch it, or list the most recent ones)"
    )
    hint = (
        f"Do not send {operation} again yet: it may already have taken effect. First {how} to "
        "check whether it did; send it again only if it did not."
    )
    last = (
        f"Send {operation} again only if it did not take effect; if you cannot tell, ask the user."
    )
    if destructive:
        hint = f"{hint} The tool may change or delete data: ask the user before calling it again."
        last = f"Ask the user before sending {operation} again: the tool may change or delete data."
    steps = [
        f"{operation[:1].upper()}{operation[1:]} was sent but no answer came back: "
        "it may already have taken effect.",
        f"Check whether it did: {how}.",
        last,
    ]
    return hint, steps


def check_with(operation: str, reader: str) -> tuple[str, list[str]]:
    """The hint and steps for a request that may have taken effect, checked by ``reader`` (the
    documented read operation, ``proxy/policy/openapi/check_first.py``)."""
    hint = (
        f"Do not send {operation} again yet: it may already have taken effect. Call {reader} "
        "to check whether it did, and send it again only if it did not."
    )
    steps = [
        f"{operation} was sent but no answer came back: it may already have taken effect.",
        f"Call {reader} to check whether it did.",
        f"Send {operation} again only if it did not take effect; if you cannot tell, ask the user.",
    ]
    return hint, steps
