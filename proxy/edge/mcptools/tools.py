"""A document's operations as MCP tools: names, descriptions, schemas and annotations.

One tool per operation (``proxy/policy/openapi/operations.py`` reads them):

- name: the ``operationId``, its characters outside ``[A-Za-z0-9_.-]`` replaced by ``_`` and cut
  at 64; an operation without one is named from its method and path (``get_items_item_id`` for
  ``GET /items/{item_id}``); a name taken twice gets ``_2``, ``_3``, ... in document order.
- ``inputSchema``: one object; path, query and header parameters by name, then the JSON body's
  properties. A name already taken by an earlier one (in that order) is given its location as a
  prefix (``query_id``, ``body_id``). A body that is not an object with properties is one
  argument, ``body``. Unknown arguments are refused (``additionalProperties: false``).
- ``outputSchema``: the first 2xx response's JSON schema when it is an object; a 2xx schema of
  another type is wrapped as ``{"result": ...}`` (and so is the body in ``structuredContent``).
- header parameters OpenAPI ignores (``Accept``, ``Content-Type``, ``Authorization``) and HTTP's
  own (``Host``, ``Content-Length``, ...) are not arguments: credentials come with the MCP request.
- annotations from the method: ``readOnlyHint`` for GET and HEAD, ``idempotentHint`` for PUT and
  DELETE, ``destructiveHint`` for DELETE; ``openWorldHint`` always (an outside API).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp_types import Tool, ToolAnnotations

from proxy.edge.mcptools.schema import is_object, standalone
from proxy.policy.openapi.operations import Operation
from proxy.policy.openapi.spec import Spec

#: Characters of a tool name (MCP: 1 to 128 of ``[A-Za-z0-9_.-]``); mend keeps 64.
MAX_NAME = 64
#: Characters of a tool's description.
MAX_DESCRIPTION = 2000
#: A wrapped output's one member.
RESULT = "result"
#: The one argument of a body that is not an object with properties.
BODY = "body"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_LOCATIONS = ("path", "query", "header")
_NOT_ARGUMENTS = frozenset(
    {"accept", "content-type", "authorization", "host", "content-length", "transfer-encoding"}
    | {"connection", "te", "upgrade", "expect", "cookie"}
)


@dataclass(frozen=True, slots=True)
class Argument:
    """Where one argument goes in the HTTP request."""

    name: str  # as the tool's inputSchema names it
    location: str  # path, query, header, body (a body property, or the whole body when key "")
    key: str  # the parameter's name or the body property's


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    operation: Operation
    arguments: tuple[Argument, ...]
    wrapped_output: bool
    definition: Tool

    def argument(self, location: str, key: str) -> Argument | None:
        for argument in self.arguments:
            if argument.location == location and argument.key == key:
                return argument
        return None

    def named(self, name: str) -> Argument | None:
        for argument in self.arguments:
            if argument.name == name:
                return argument
        return None

    @property
    def whole_body(self) -> bool:
        return any(a.location == "body" and not a.key for a in self.arguments)


@dataclass(frozen=True, slots=True)
class Toolbox:
    """The tools of one document, in document order, and by name."""

    tools: tuple[ToolSpec, ...]
    by_name: Mapping[str, ToolSpec]

    @classmethod
    def of(cls, spec: Spec) -> Toolbox:
        tools: list[ToolSpec] = []
        taken: set[str] = set()
        for operation in spec.operations.all:
            raw = _raw_operation(spec, operation)
            name = _unique(_name(operation, raw), taken)
            tools.append(_tool(spec, operation, raw, name))
        return cls(tuple(tools), {t.name: t for t in tools})


def _raw_operation(spec: Spec, operation: Operation) -> Mapping[str, Any]:
    paths = spec.document.data.get("paths")
    item = spec.document.deref(paths.get(operation.path)) if isinstance(paths, Mapping) else None
    raw = item.get(operation.method.lower()) if isinstance(item, Mapping) else None
    return raw if isinstance(raw, Mapping) else {}


def _name(operation: Operation, raw: Mapping[str, Any]) -> str:
    written = raw.get("operationId")
    if isinstance(written, str) and written.strip():
        base = written
    else:
        words = [w for w in re.split(r"[/{}]+", operation.path) if w]
        base = "_".join([operation.method.lower(), *words])
    return _UNSAFE.sub("_", base).strip("_")[:MAX_NAME] or operation.method.lower()


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        suffix = f"_{n}"
        candidate = name[: MAX_NAME - len(suffix)] + suffix
    taken.add(candidate)
    return candidate


def _tool(spec: Spec, operation: Operation, raw: Mapping[str, Any], name: str) -> ToolSpec:
    document = spec.document
    properties: dict[str, Any] = {}
    required: list[str] = []
    arguments: list[Argument] = []
    described = _parameter_descriptions(spec, operation, raw)

    def add(location: str, key: str, schema: Any, needed: bool, description: str | None) -> None:
        argument = key if key and key not in properties else f"{location}_{key}".rstrip("_")
        while argument in properties:  # the prefixed name is taken too
            argument += "_"
        schema = dict(schema) if isinstance(schema, Mapping) else {}
        if description and "description" not in schema:
            schema["description"] = description[:MAX_DESCRIPTION]
        properties[argument] = schema
        if needed:
            required.append(argument)
        arguments.append(Argument(argument, location, key))

    for location in _LOCATIONS:
        for param in operation.parameters:
            if param.location == location and not _ignored(param.location, param.name):
                schema = standalone(param.schema, document)
                add(location, param.name, schema, param.required, described.get(param.name))
    body = operation.body
    if body is not None and body.schema is not None:
        schema = standalone(body.schema, document)
        props = schema.get("properties") if is_object(schema) else None
        if isinstance(props, Mapping) and props:
            inner = schema.get("required")
            needed = set(inner) if body.required and isinstance(inner, list) else set()
            for key, sub in props.items():
                add("body", str(key), sub, key in needed, None)
        else:
            add("body", "", schema, body.required, _text(raw.get("requestBody"), spec))
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        input_schema["required"] = required
    output, wrapped = _output(spec, raw)
    definition = Tool(
        name=name,
        description=_description(operation, raw),
        input_schema=input_schema,
        output_schema=output,
        annotations=_annotations(operation.method),
    )
    return ToolSpec(name, operation, tuple(arguments), wrapped, definition)


def _ignored(location: str, name: str) -> bool:
    """Header parameters OpenAPI ignores (Accept, Content-Type, Authorization), and those that
    are HTTP's framing, not the API's: never arguments."""
    return location == "header" and name.lower() in _NOT_ARGUMENTS


def _parameter_descriptions(
    spec: Spec, operation: Operation, raw: Mapping[str, Any]
) -> dict[str, str]:
    """Each parameter's ``description`` (the path item's, then the operation's)."""
    out: dict[str, str] = {}
    paths = spec.document.data.get("paths")
    item = spec.document.deref(paths.get(operation.path)) if isinstance(paths, Mapping) else {}
    shared = item.get("parameters") if isinstance(item, Mapping) else None
    for written in [*_list(shared), *_list(raw.get("parameters"))]:
        param = spec.document.deref(written)
        if isinstance(param, Mapping) and isinstance(param.get("description"), str):
            out[str(param.get("name"))] = param["description"]
    return out


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(holder: Any, spec: Spec) -> str | None:
    holder = spec.document.deref(holder)
    text = holder.get("description") if isinstance(holder, Mapping) else None
    return text if isinstance(text, str) else None


def _description(operation: Operation, raw: Mapping[str, Any]) -> str:
    parts = [raw[k].strip() for k in ("summary", "description") if isinstance(raw.get(k), str)]
    parts = [p for i, p in enumerate(parts) if p and p not in parts[:i]]
    parts.append(f"({operation.method} {operation.path})")
    return "\n\n".join(parts)[:MAX_DESCRIPTION]


def _output(spec: Spec, raw: Mapping[str, Any]) -> tuple[dict[str, Any] | None, bool]:
    """The tool's outputSchema, and whether the body is wrapped in ``{"result": ...}``."""
    responses = raw.get("responses")
    if not isinstance(responses, Mapping):
        return None, False
    for status, written in sorted(responses.items(), key=lambda item: str(item[0])):
        if not (str(status).startswith("2") and len(str(status)) == 3):
            continue
        response = spec.document.deref(written)
        content = response.get("content") if isinstance(response, Mapping) else None
        for media_type, media in content.items() if isinstance(content, Mapping) else ():
            if _is_json(str(media_type)) and isinstance(media, Mapping) and "schema" in media:
                schema = standalone(media["schema"], spec.document)
                if is_object(schema):
                    return schema, False
                wrapped = {"type": "object", "properties": {RESULT: schema}, "required": [RESULT]}
                return wrapped, True
        return None, False
    return None, False


def _is_json(media_type: str) -> bool:
    media_type = media_type.split(";", maxsplit=1)[0].strip().lower()
    return media_type == "application/json" or media_type.endswith("+json")


def _annotations(method: str) -> ToolAnnotations:
    return ToolAnnotations(
        read_only_hint=method in ("GET", "HEAD"),
        idempotent_hint=method in ("PUT", "DELETE"),
        destructive_hint=method == "DELETE",
        open_world_hint=True,
    )
