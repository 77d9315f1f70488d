"""What the operator tools say about a document: ``mend check --openapi`` lists the operations
mend will recognise; ``mend explain`` shows the operation and the schema facts it used."""

from __future__ import annotations

from typing import Any

from proxy.policy.envelope.model import Envelope
from proxy.policy.openapi import facts
from proxy.policy.openapi.agent_request import Request
from proxy.policy.openapi.enrich import enrich, schema_at
from proxy.policy.openapi.spec import Mount, Spec


def operation_lines(spec: Spec) -> list[str]:
    """One line per operation: method, path as matched (with the base path), id, what is read."""
    operations = spec.operations
    lines = [
        f"ok: {spec.source}: OpenAPI {spec.document.version}, {len(operations.all)} operations"
        + (f", base path {operations.base_path}" if operations.base_path else "")
    ]
    for op in sorted(operations.all, key=lambda o: (o.path, o.method)):
        params = ", ".join(
            f"{p.location}:{p.name}{'' if p.required else '?'}" for p in op.parameters
        )
        body = op.body
        read = [params] if params else []
        if body is not None:
            kind = "JSON" if body.schema is not None else ", ".join(body.media_types) or "any"
            read.append(f"body {kind}{'' if body.required else '?'}")
        detail = f"  ({'; '.join(read)})" if read else ""
        lines.append(f"  {op.method:<7} {operations.base_path}{op.path}  {op.id}{detail}")
    return lines


def explained(
    spec: Spec, mount: Mount, request: Request, envelope: Envelope | None
) -> tuple[Envelope | None, dict[str, Any]]:
    """The envelope as the route's document enriches it, and the facts it used."""
    located = spec.locate(request.method, request.path, mount)
    report: dict[str, Any] = {"document": str(spec.source), "version": spec.document.version}
    if located is None:
        report["operation"] = None
        report["note"] = f"outside the document's base path {spec.operations.base_path!r}"
        return envelope, report
    match = located.match
    report["spec_path"] = located.spec_path
    if match is None or match.operation is None:
        report["operation"] = None
        report["documented_methods"] = sorted(match.template.methods) if match else []
    else:
        operation = match.operation
        report["operation"] = operation.describe()
        report["path_params"] = match.params
        fields = []
        for field in envelope.invalid_fields if envelope is not None else ():
            found = schema_at(spec, operation, field.field)
            fields.append(
                {
                    "field": field.field,
                    "location": found[1] if found else None,
                    "schema": facts.allowed_values(found[0], spec.document) if found else None,
                }
            )
        report["fields"] = fields
    if envelope is not None:
        envelope = enrich(envelope, spec, mount, request)
    return envelope, report
