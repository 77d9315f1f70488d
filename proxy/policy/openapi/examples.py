"""A documented operation's example request: its path, query and body, filled from the document."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from proxy.policy.openapi import facts
from proxy.policy.openapi.operations import Operation
from proxy.policy.openapi.spec import Mount, Spec


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
