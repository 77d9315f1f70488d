"""``invalid_fields``: each offending field an upstream names, as a pointer with its constraints."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proxy.policy.envelope import constraints
from proxy.policy.envelope.model import InvalidField, made
from proxy.policy.envelope.pointer import located, to_pointer
from proxy.policy.envelope.scrubber import recalled
from proxy.policy.envelope.variables import single_line
from proxy.policy.exchange import NOT_JSON, Exchange
from proxy.policy.rules import header_json
from proxy.policy.rules.compiled_envelope import CompiledInvalidFields
from proxy.policy.rules.template import scrub_value

Scrub = Callable[[str], str]


def _scrub_pointer(pointer: str, scrub: Scrub) -> str:
    # segment by segment: "/data/attributes/qty" is JSON keys, not a file path to hide
    return "/".join(scrub(segment) if segment else segment for segment in pointer.split("/"))


def _camel(pointer: str) -> str:
    return "/".join(s[:1].lower() + s[1:] if not s.isdigit() else s for s in pointer.split("/"))


def _invalid_field(
    pointer: str,
    reason: Any,
    received: Any,
    context: Any,
    scrub: Scrub,
    location: str | None = None,
) -> InvalidField:
    reason_text = single_line(scrub(str(reason)), 300) if reason else "is invalid"
    allowed = constraints.from_context(context) or constraints.from_reason(reason_text)
    if allowed:
        allowed = constraints.normalise(allowed, reason_text)
    elif context is not None and not isinstance(context, dict):
        allowed = context  # a rule that names the allowed values directly
    received = scrub_value(received, scrub)
    allowed = scrub_value(allowed, scrub)
    return made(
        InvalidField,
        {
            "field": _scrub_pointer(pointer, scrub),
            "reason": reason_text,
            "received": received,
            "allowed_values": allowed,
            # the field's own suggestion, the one the envelope's top level repeats (``build``)
            "suggested_value": constraints.suggest(allowed, received)
            if isinstance(allowed, dict)
            else None,
            "location": location,
        },
    )


def named(pointer: str, reason: Any, scrub: Scrub) -> InvalidField:
    """The one invalid field a rule's ``field:`` names when it lists none: the message is its
    reason, and what the message bounds are its allowed values."""
    return _invalid_field(pointer, reason, None, None, scrub)


def written(
    items: list[dict[str, Any]], render: Callable[[Any], Any], scrub: Scrub
) -> list[InvalidField]:
    """The fields a rule lists itself (``invalid_fields:`` as a list of templates), rendered."""
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


def found(
    compiled: CompiledInvalidFields | None, exchange: Exchange, scrub: Scrub
) -> list[InvalidField]:
    """The fields the upstream's JSON names where a rule's queries say, at most 100.

    What a document gave before, scrubbed by the same remembering redactor, is given again from
    the rule's memory, and the kinds its scrubbing reported are reported again: the fields are a
    function of the document and the redactor alone (``Scrubber``).
    """
    if compiled is None:
        return []
    if compiled.header is not None:
        value, written = header_json.document(exchange, compiled.header)
    else:
        value, written = exchange.json, exchange.written() if exchange.is_json else None
    if value is NOT_JSON:
        return []
    fields = recalled(
        compiled.memory,
        scrub,
        None,
        written,
        lambda: tuple(_found(compiled, value, scrub)),
    )
    return list(fields)


def _found(compiled: CompiledInvalidFields, document: Any, scrub: Scrub) -> list[InvalidField]:
    out: list[InvalidField] = []
    for location, reason, received, context in compiled.items(document)[:100]:
        found = located(location, compiled.strip)
        if found is None:
            continue
        pointer, where = found
        if compiled.camel:
            pointer = _camel(pointer)
        out.append(_invalid_field(pointer, reason, received, context, scrub, where))
    return out
