"""The envelope post-processor: what a route's OpenAPI document adds to an envelope.

Called once per envelope, after it is built (``Proxy._reply``); a route without a document costs
one dictionary lookup, and a success never gets here. It adds:

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

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from proxy.policy.envelope import Action, Category, Envelope, InvalidField
from proxy.policy.exchange import NOT_JSON
from proxy.policy.openapi import facts
from proxy.policy.openapi.named import named_fields
from proxy.policy.openapi.operations import Link, Operation, PathMatch, Template, split
from proxy.policy.openapi.spec import Mount, Spec
from proxy.policy.openapi.violations import Violation, echo

#: Operations named in ``allowed_values.operations`` for an undocumented path.
NEAREST = 3
#: Templates compared with an undocumented path (a document may have thousands).
_COMPARED = 500
#: Tails of an undocumented pointer tried against the document (the longest first).
_TAILS = 8
#: Characters of a path segment compared when looking for the nearest template.
_SEGMENT_CHARS = 64
#: Methods an agent probably meant instead of the one it sent.
_KIN = {
    "PUT": ("PATCH", "POST"),
    "PATCH": ("PUT", "POST"),
    "POST": ("PUT", "PATCH"),
    "HEAD": ("GET",),
    "GET": ("HEAD",),
}


@dataclass(frozen=True, slots=True)
class Request:
    """What the enricher reads of the agent's request."""

    method: str
    path: str  # raw (percent-encoded), without the query
    query: Any  # a MultiDict of the decoded query
    headers: Mapping[str, str]
    response_json: Any = None  # the upstream's error document, for a link's $response.body
    request_json: Any = NOT_JSON  # the agent's JSON body, when mend kept it (``Call.tee``)


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
        return _redirect(envelope, spec, mount, request, located.spec_path, match)
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
        update.update(_linked(envelope, spec, mount, operation, match, request))
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
    spec: Spec, operation: Operation, segments: list[str]
) -> tuple[Any, str, str | None] | None:
    """``schema_at`` for pointer segments, with the parameter's documented name (``None`` in
    the body)."""
    body = operation.body
    if body is not None and body.schema is not None:
        if not segments:
            return body.schema, "body", None
        found = facts.at_pointer(body.schema, segments, spec.document)
        if found is not None:
            return found, "body", None
    if segments:
        name = segments[0].replace("~1", "/").replace("~0", "~")
        # exact first; then regardless of case (headers, and Prism's "petid" for petId)
        for exact in (True, False):
            for param in operation.parameters:
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


def _documented(spec: Spec, operation: Operation, pointer: str) -> tuple[str, Any, str] | None:
    """The documented pointer (``documented_pointer``), its schema and where it is."""
    segments = split(pointer) if pointer else []
    if not segments:
        found = _located(spec, operation, segments)
        return None if found is None else (pointer, found[0], found[1])
    for start in range(min(len(segments), _TAILS)):
        tail = segments[start:]
        found = _located(spec, operation, tail)
        if found is None:
            continue
        schema, location, name = found
        if name is not None and name != tail[0].replace("~1", "/").replace("~0", "~"):
            tail = [_escape(name), *tail[1:]]
        return "/" + "/".join(tail), schema, location
    return None


def _escape(segment: str) -> str:
    return segment.replace("~", "~0").replace("/", "~1")


def _with_facts(
    field: InvalidField, spec: Spec, operation: Operation, request: Request
) -> InvalidField:
    documented = _documented(spec, operation, field.field)
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
        received = echo(_pointer(request.request_json, field.field, None))
    suggested = field.suggested_value
    if suggested is None and isinstance(allowed, Mapping):
        suggested = facts.suggest(allowed, received)
    return field.model_copy(
        update={
            "allowed_values": allowed,
            "received": received,
            "suggested_value": suggested,
            "location": location,
            "documented": True,
        }
    )


def example_request(
    spec: Spec, mount: Mount, operation: Operation, sent: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A minimal valid request for ``operation``: required parameters and the body, from the
    document's examples and defaults (built from the schema when it has none); a path parameter
    the agent sent (and nothing says is wrong) is kept as sent."""
    key = (operation.method, operation.path)
    example = spec.examples.get(key)
    if example is None:  # built once per operation, on its first envelope
        example = spec.examples[key] = _example(spec, operation)
    path_values, query, body = example
    path = operation.path
    for name, value in path_values.items():
        given = (sent or {}).get(name)
        path = path.replace("{" + name + "}", quote(given, safe="") if given else value)
    return {
        "method": operation.method,
        "path": spec.agent_path(path, mount),
        "query": dict(query),
        "body": body,
    }


def _example(spec: Spec, operation: Operation) -> tuple[dict[str, str], dict[str, Any], Any]:
    document = spec.document
    path_values: dict[str, str] = {}
    query: dict[str, Any] = {}
    for param in operation.parameters:
        value = param.example if param.has_example else facts.example(param.schema, document)
        if param.location == "path":
            path_values[param.name] = _path_value(value)
        elif param.location == "query" and param.required:
            query[param.name] = value
    body = None
    if operation.body is not None and operation.body.schema is not None:
        body = (
            operation.body.example
            if operation.body.has_example
            else facts.example(operation.body.schema, document)
        )
    return path_values, query, body


def _path_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "1" if value is None or value == "" else str(value)


def _linked(
    envelope: Envelope,
    spec: Spec,
    mount: Mount,
    operation: Operation,
    match: PathMatch,
    request: Request,
) -> dict[str, Any]:
    """``next_operation`` and its arguments from the documented response's first link."""
    status = envelope.upstream_status
    links: tuple[Link, ...] = ()
    if status is not None:
        for key in (str(status), f"{status // 100}XX", "default"):
            if key in operation.links:
                links = operation.links[key]
                break
    for link in links:
        target = _link_target(spec, link.operation_id, link.operation_ref)
        if target is None:
            continue
        args: dict[str, Any] = {
            str(name): _expression(value, match, request)
            for name, value in list(link.parameters.items())[:32]
        }
        next_operation = f"{target.method} {spec.agent_path(target.path, mount)}"
        out: dict[str, Any] = {"next_operation": next_operation, "next_operation_args": args}
        if envelope.action is Action.FIX_REQUEST:
            out["action"] = Action.CALL_OTHER_OPERATION
            out["hint"] = f"Call {next_operation} first, then send {request.method} again."
        return out
    return {}


def _link_target(spec: Spec, operation_id: Any, operation_ref: Any) -> Operation | None:
    operations = spec.operations
    if isinstance(operation_id, str):
        return operations.by_id.get(operation_id)
    if isinstance(operation_ref, str) and operation_ref.startswith("#/paths/"):
        parts = operation_ref[len("#/paths/") :].split("/")
        if len(parts) == 2:
            path = parts[0].replace("~1", "/").replace("~0", "~")
            for op in operations.all:
                if op.path == path and op.method == parts[1].upper():
                    return op
    return None


def _expression(value: Any, match: PathMatch, request: Request) -> Any:
    """A link parameter: a runtime expression read from the request or the response, or a
    literal. An expression mend cannot read is kept as written."""
    if not isinstance(value, str) or not value.startswith("$"):
        return value
    source, _, name = value.partition(".")
    if source == "$request":
        where, _, key = name.partition(".")
        if where == "path":
            return match.params.get(key, value)
        if where == "query":
            return request.query.get(key, value)
        if where == "header":
            return request.headers.get(key, value)
    if value.startswith("$response.body#"):
        return _pointer(request.response_json, value[len("$response.body#") :], value)
    return value


def _pointer(document: Any, pointer: str, default: Any) -> Any:
    node = document
    for escaped in split(pointer) if pointer else []:
        segment = escaped.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and segment in node:
            node = node[segment]
        elif isinstance(node, list) and segment.isdigit() and int(segment) < len(node):
            node = node[int(segment)]
        else:
            return default
    return node


def _redirect(
    envelope: Envelope,
    spec: Spec,
    mount: Mount,
    request: Request,
    spec_path: str,
    match: PathMatch | None,
) -> Envelope:
    """A 404 or 405 on a path or method the document lacks: the nearest documented operation."""
    method = request.method.upper()
    candidates = _nearest(spec, method, spec_path, match)
    if not candidates:
        return envelope
    operations = [f"{m} {spec.agent_path(t.path, mount)}" for m, t, _ in candidates]
    chosen_method, template, params = candidates[0]
    # the methods of the path sent when it is documented (a 405's Allow), else the suggestion's
    methods = sorted((match.template if match is not None else template).methods)
    allowed: dict[str, Any] = {"methods": methods, "operations": operations}
    next_operation = operations[0]
    hint = (
        f"{method} {unquote(request.path)[:200]} is not an operation of this API; "
        f"send {next_operation} instead."
    )
    target = template.methods[chosen_method]
    update: dict[str, Any] = {
        "next_operation": next_operation,
        "next_operation_args": params or None,
        "allowed_values": allowed,
        "suggested_value": next_operation,
        "example_request": example_request(spec, mount, target, params),
    }
    if not envelope.retryable:  # a retry (a gateway's 404 during a deploy) stays a retry
        update["action"] = Action.CALL_OTHER_OPERATION
        update["hint"] = hint
        update["steps"] = (f"Send {next_operation} instead.",)
    return envelope.model_copy(update=update)


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


def _nearest(
    spec: Spec, method: str, spec_path: str, match: PathMatch | None = None
) -> list[tuple[str, Template, dict[str, str]]]:
    """The documented operations nearest ``method spec_path``, path and method weighed
    together: the path segment by segment (0 to 2, a template parameter fitting anything), plus
    1 for the method sent and 0.4 for a kindred one, so ``GET /pets`` is nearer ``GET
    /pet/findByStatus`` than ``POST /pet``, and ``POST /user/repo`` nearer ``POST /user/repos``
    than ``GET /user/{account_id}``, whose template the path fits."""
    segments = [s[:_SEGMENT_CHARS] for s in split(spec_path)[:16]]
    scored: list[tuple[float, str, Template, dict[str, str]]] = []
    # templates of about the request's length, at most _COMPARED of them: a 404 must stay cheap
    near = [t for t in spec.operations.templates if abs(len(t.literals) - len(segments)) <= 1]
    near = near[:_COMPARED]
    if match is not None and all(t is not match.template for t in near):
        near.append(match.template)
    for template in near:
        score, params = _path_score(segments, template)
        if match is not None and template is match.template:
            params = dict(match.params)
        for op_method in template.methods:
            kin = _KIN.get(method, ())
            bonus = 1.0 if op_method == method else 0.4 if op_method in kin else 0.0
            scored.append((score + bonus, op_method, template, params))
    scored.sort(key=lambda item: (-item[0], item[2].path, item[1]))
    return [(m, t, p) for _, m, t, p in scored[:NEAREST]]


def _path_score(segments: list[str], template: Template) -> tuple[float, dict[str, str]]:
    literals = template.literals
    length = max(len(segments), len(literals), 1)
    score = 0.0
    params: dict[str, str] = {}
    for index, (sent, literal) in enumerate(zip(segments, literals, strict=False)):
        if literal is None:
            score += 0.75
            pattern = template.patterns[index]
            if pattern is not None and len(pattern[1]) == 1:
                params[pattern[1][0]] = unquote(sent)
        else:
            score += difflib.SequenceMatcher(None, sent.lower(), literal.lower()).ratio()
    if len(segments) != len(literals):
        params = {}
    return score / length * 2, params
