"""The envelope post-processor: what a route's OpenAPI document adds to an envelope.

Called once per envelope, after it is built (``envelope_steps.Enrich``); a route without a
document costs one dictionary lookup, and a success never gets here. It adds:

- ``operation`` and ``example_request`` for a documented operation;
- per ``invalid_fields`` entry, the schema's ``allowed_values``, a ``suggested_value`` and the
  field's ``location``, or ``documented: false`` when the document does not know the pointer;
- for a 404 or 405 on a path or method the document lacks, ``next_operation`` (the closest
  documented operation, as a path the agent can send to mend) and the allowed methods;
- for an error response whose documented ``links`` name an operation, ``next_operation`` and
  ``next_operation_args``;
- for a request refused by validation (``violations``), every violation as an invalid field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import unquote

from proxy.policy.envelope.model import Category, Envelope, InvalidField
from proxy.policy.envelope.pointer import escape_segment
from proxy.policy.exchange import NOT_JSON
from proxy.policy.openapi import facts
from proxy.policy.openapi.agent_request import Request
from proxy.policy.openapi.examples import example_request
from proxy.policy.openapi.links import linked, resolve_pointer
from proxy.policy.openapi.named import named_fields
from proxy.policy.openapi.nearest import nearest_redirect
from proxy.policy.openapi.operations import Operation, split
from proxy.policy.openapi.spec import Mount, Spec
from proxy.policy.openapi.violations import Violation, echo

#: Tails of an undocumented pointer tried against the document (the longest first).
_TAILS = 8


def enrich(
    envelope: Envelope,
    spec: Spec,
    mount: Mount,
    request: Request,
    violations: Sequence[Violation] | None = None,
) -> Envelope:
    located = spec.locate(request.method, request.path, mount)
    if located is None:
        return envelope
    match = located.match
    if match is None or match.operation is None:
        if not _wrong_place(envelope):
            return envelope
        return nearest_redirect(envelope, spec, mount, request, located.spec_path, match)
    operation = match.operation
    sent_fields = envelope.invalid_fields or _named(envelope, spec, operation)
    fields = (
        [_from_violation(v) for v in violations]
        if violations is not None
        else [_with_facts(f, spec, operation, request) for f in sent_fields]
    )
    bad = {f.field for f in fields}
    sent = {k: v for k, v in match.params.items() if "/" + k not in bad}
    update: dict[str, Any] = {
        "operation": operation.describe(),
        "example_request": example_request(spec, mount, operation, sent),
    }
    update["invalid_fields"] = tuple(fields)
    if violations is None and fields:  # the field as the document spells it
        renamed = {f.field: g.field for f, g in zip(sent_fields, fields, strict=True)}
        if envelope.field is None or envelope.field in renamed:
            update["field"] = renamed.get(envelope.field or "", fields[0].field)
    if violations is not None and fields:
        update["field"] = fields[0].field
        update["message"] = (
            f"The request has {len(fields)} invalid field{'s' if len(fields) > 1 else ''}; "
            "it was not sent to the API."
        )
        update["steps"] = (
            *(f"Change {f.field} ({f.location}): {f.reason}." for f in fields),
            f"Send {request.method} {unquote(request.path)} again.",
        )
    update["steps"] = _advised(update.get("steps", envelope.steps), fields)
    pointer = update.get("field", envelope.field)
    primary = next((f for f in fields if f.field == pointer), None)
    if primary is not None:
        if envelope.allowed_values is None or violations is not None:
            update["allowed_values"] = primary.allowed_values
        if envelope.suggested_value is None or violations is not None:
            update["suggested_value"] = primary.suggested_value
    if envelope.next_operation is None:
        update.update(linked(envelope, spec, mount, operation, match, request))
    return envelope.model_copy(update=update)


def _named(envelope: Envelope, spec: Spec, operation: Operation) -> list[InvalidField]:
    """For a validation envelope that lists no field: the documented fields its message names."""
    if envelope.category is not Category.VALIDATION:
        return []
    pointers = named_fields(envelope.message, lambda p: documented_pointer(spec, operation, p) == p)
    return [InvalidField(field=p, reason=envelope.message[:300]) for p in pointers]


def _advised(steps: Sequence[str], fields: Sequence[InvalidField]) -> tuple[str, ...]:
    """Each "Change /field: ..." step with what the document allows there and a suggestion."""
    by_step = {f"Change {f.field}": f for f in fields if f.documented}
    out = []
    for step in steps:
        field = by_step.get(step.split(":", 1)[0].split(" (", 1)[0])
        advice = _advice(field, step) if field is not None else None
        out.append(f"{step.rstrip('.')}; {advice}." if advice else step)
    return tuple(out)


def _advice(field: InvalidField, step: str) -> str | None:
    allowed = field.allowed_values if isinstance(field.allowed_values, Mapping) else {}
    parts = []
    enum = allowed.get("enum")
    if isinstance(enum, list) and enum:
        shown = ", ".join(str(v) for v in enum[:10]) + (", ..." if len(enum) > 10 else "")
        parts.append(f"send one of {shown}")
    bounds = (
        ("minimum", "at least {}"),
        ("maximum", "at most {}"),
        ("minLength", "at least {} characters"),
        ("maxLength", "at most {} characters"),
        ("pattern", "matching {}"),
        ("format", "a valid {}"),
    )
    if not parts:  # an enum says it all
        said = (words.format(allowed[key]) for key, words in bounds if key in allowed)
        parts.extend(part for part in said if part not in step)  # not what the reason says
    if field.suggested_value is not None:
        parts.append(f"suggested: {field.suggested_value!r}"[:120])
    return ", ".join(parts)[:300] if parts else None


def _wrong_place(envelope: Envelope) -> bool:
    return envelope.upstream_status in (404, 405) or envelope.category in (
        Category.NOT_FOUND,
        Category.METHOD_NOT_ALLOWED,
    )


def _from_violation(violation: Violation) -> InvalidField:
    return InvalidField(
        field=violation.pointer,
        reason=violation.reason,
        received=violation.received,
        allowed_values=violation.allowed_values,
        suggested_value=violation.suggested_value,
        location=violation.location,
        documented=True,
    )


def schema_at(spec: Spec, operation: Operation, pointer: str) -> tuple[Any, str] | None:
    """The schema a pointer names in the operation's request, and where: the JSON body first,
    then a parameter by name (query, path, header)."""
    found = _located(spec, operation, split(pointer) if pointer else [])
    return None if found is None else (found[0], found[1])


def _located(
    spec: Spec, operation: Operation, segments: list[str], where: str | None = None
) -> tuple[Any, str, str | None] | None:
    """``schema_at`` for pointer segments, with the parameter's documented name (``None`` in
    the body); where the upstream said the field is (``where``), there first."""
    if where is not None:
        found = _located_in(spec, operation, segments, where)
        if found is not None:
            return found
    return _located_in(spec, operation, segments, None)


def _located_in(
    spec: Spec, operation: Operation, segments: list[str], where: str | None
) -> tuple[Any, str, str | None] | None:
    """``_located`` in the body or the parameters of one location (``None``: the body first,
    then any parameter)."""
    body = operation.body
    if where in (None, "body") and body is not None and body.schema is not None:
        if not segments:
            return body.schema, "body", None
        found = facts.at_pointer(body.schema, segments, spec.document)
        if found is not None:
            return found, "body", None
    if segments and where != "body":
        name = segments[0].replace("~1", "/").replace("~0", "~")
        # exact first; then regardless of case (headers, and Prism's "petid" for petId)
        for exact in (True, False):
            for param in operation.parameters:
                if where is not None and param.location != where:
                    continue
                if (param.name == name) if exact else (param.name.lower() == name.lower()):
                    found = facts.at_pointer(param.schema, segments[1:], spec.document)
                    if found is not None:
                        return found, param.location, param.name
    return None


def documented_pointer(spec: Spec, operation: Operation, pointer: str) -> str | None:
    """``pointer`` as the document spells it: as sent when the document knows it, else its
    longest tail the document knows (Quarkus' ``/create/arg0/name`` is ``/name``), a parameter's
    name in the document's case; ``None`` when no tail is documented."""
    found = _documented(spec, operation, pointer)
    return None if found is None else found[0]


def _documented(
    spec: Spec, operation: Operation, pointer: str, where: str | None = None
) -> tuple[str, Any, str] | None:
    """The documented pointer (``documented_pointer``), its schema and where it is, looked for
    first where the upstream said it is (``where``)."""
    segments = split(pointer) if pointer else []
    if not segments:
        found = _located(spec, operation, segments, where)
        return None if found is None else (pointer, found[0], found[1])
    for start in range(min(len(segments), _TAILS)):
        tail = segments[start:]
        found = _located(spec, operation, tail, where)
        if found is None:
            continue
        schema, location, name = found
        if name is not None and name != tail[0].replace("~1", "/").replace("~0", "~"):
            tail = [escape_segment(name), *tail[1:]]
        return "/" + "/".join(tail), schema, location
    return None


def _with_facts(
    field: InvalidField, spec: Spec, operation: Operation, request: Request
) -> InvalidField:
    documented = _documented(spec, operation, field.field, field.location)
    if documented is None:
        return field.model_copy(update={"documented": False})
    pointer, schema, location = documented
    field = field.model_copy(update={"field": pointer})
    known = facts.allowed_values(schema, spec.document)
    allowed: Any = field.allowed_values
    if known:
        allowed = {**allowed, **known} if isinstance(allowed, Mapping) else known
    received = field.received
    if received is None and location == "query" and field.field:
        received = request.query.get(split(field.field)[0])
    elif received is None and location == "body" and request.request_json is not NOT_JSON:
        received = echo(resolve_pointer(request.request_json, field.field, None))
    suggested = field.suggested_value
    if suggested is None and isinstance(allowed, Mapping):
        suggested = facts.suggest(allowed, received)
    if suggested is None and schema is not None:  # what the document itself offers
        suggested = _scalar(facts.documented_example(schema, spec.document))
    return field.model_copy(
        update={
            "allowed_values": allowed,
            "received": received,
            "suggested_value": suggested,
            "location": location,
            "documented": True,
        }
    )


#: The longest documented example string offered as a suggestion.
_EXAMPLE_MAX = 200


def _scalar(value: Any) -> Any:
    """``value`` when it is a number, a boolean or a short string, else ``None`` (an example
    object is the example request's business)."""
    if isinstance(value, bool | int | float) or (
        isinstance(value, str) and len(value) <= _EXAMPLE_MAX
    ):
        return value
    return None


def allow_header(allowed_values: Any) -> str | None:
    """The ``Allow`` header of a 405 envelope from the methods its ``allowed_values`` name (the
    document's for the path, or the upstream's ``Allow`` read back); ``None`` without any."""
    methods = allowed_values.get("methods") if isinstance(allowed_values, Mapping) else None
    if methods is None:
        methods = allowed_values
    if not isinstance(methods, list):
        return None
    names = [m for m in methods if isinstance(m, str) and m.isascii() and m.isalpha()]
    return ", ".join(m[:16] for m in names[:16]) or None
