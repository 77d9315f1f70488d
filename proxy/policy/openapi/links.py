"""The next operation an error response's documented ``links`` name, its arguments filled in."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.policy.envelope.model import Action, Envelope
from proxy.policy.openapi.agent_request import Request
from proxy.policy.openapi.operations import Link, Operation, PathMatch, split
from proxy.policy.openapi.spec import Mount, Spec


def linked(
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
        return resolve_pointer(request.response_json, value[len("$response.body#") :], value)
    return value


def resolve_pointer(document: Any, pointer: str, default: Any) -> Any:
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
