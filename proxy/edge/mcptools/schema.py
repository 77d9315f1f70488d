"""A document's schema as a standalone JSON Schema: what a tool's ``inputSchema`` and
``outputSchema`` hold.

A tool schema travels without its document, so local ``$ref``s are inlined (a cycle, or nesting
past ``MAX_DEPTH``, becomes ``{}``: any value) and OpenAPI 3.0's ``nullable`` becomes a type list.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.policy.openapi.document import Document

#: Nesting levels inlined; deeper (or recursive) schemas accept anything below.
MAX_DEPTH = 24
#: Keys of OpenAPI's schema object that JSON Schema does not know.
_OPENAPI_ONLY = frozenset({"nullable", "discriminator", "xml", "externalDocs", "example"})


def standalone(schema: Any, document: Document, depth: int = 0, seen: tuple[str, ...] = ()) -> Any:
    """``schema`` with its refs inlined, as plain JSON Schema."""
    if depth > MAX_DEPTH:
        return {}
    if isinstance(schema, Mapping):
        ref = schema.get("$ref")
        if isinstance(ref, str):
            if ref in seen:
                return {}
            return standalone(document.deref(schema), document, depth + 1, (*seen, ref))
        out = {
            key: _value(key, value, document, depth, seen)
            for key, value in schema.items()
            if key not in _OPENAPI_ONLY and not (isinstance(key, str) and key.startswith("x-"))
        }
        if document.version == "3.0" and schema.get("nullable") is True:
            out = _nullable(out)
        return out
    if isinstance(schema, list):
        return [standalone(item, document, depth + 1, seen) for item in schema]
    return schema


def _value(key: str, value: Any, document: Document, depth: int, seen: tuple[str, ...]) -> Any:
    if key in ("properties", "patternProperties", "$defs", "definitions") and isinstance(
        value, Mapping
    ):  # a map of names to schemas: the names are not schema keywords
        return {name: standalone(sub, document, depth + 1, seen) for name, sub in value.items()}
    if key in ("enum", "const", "default", "examples", "required"):
        return value
    return standalone(value, document, depth + 1, seen)


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return {**schema, "type": [kind, "null"]}
    if "enum" in schema and None not in schema["enum"]:
        return {**schema, "enum": [*schema["enum"], None]}
    return schema


def is_object(schema: Any) -> bool:
    """Whether a standalone schema describes a JSON object (a tool's output schema must)."""
    if not isinstance(schema, Mapping):
        return False
    kind = schema.get("type")
    return kind == "object" or (kind is None and "properties" in schema)
