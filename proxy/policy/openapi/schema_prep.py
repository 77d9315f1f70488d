"""Request schemas readied for the two validators: refs resolved, RE2 patterns, 3.0's nullable."""

from __future__ import annotations

import binascii
import functools
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from proxy.policy.openapi.document import BASE_URI, Document
from proxy.policy.regex import Linear, linear

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError


def absolute_refs(schema: Any, depth: int = 0) -> Any:
    """A copy of an inline schema whose ``#/...`` refs name the document in the registry."""
    if depth > 64:
        return schema
    if isinstance(schema, Mapping):
        return {
            k: (
                BASE_URI + v
                if k == "$ref" and isinstance(v, str) and v.startswith("#")
                else absolute_refs(v, depth + 1)
            )
            for k, v in schema.items()
        }
    if isinstance(schema, list):
        return [absolute_refs(v, depth + 1) for v in schema]
    return schema


#: The keywords beside which OpenAPI 3.0's ``nullable: true`` still admits ``null``.
NULLABLE_BESIDE = ("oneOf", "anyOf", "allOf", "enum")
#: OpenAPI's integer formats and the ranges they name.
_INT_FORMATS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def referenced(document: Document) -> dict[str, Any]:
    """The document reduced to the subtrees its refs name, three segments deep
    (``#/components/schemas/Pet``, ``#/paths/~1pets/get``), examples left out: the schemas a
    ``$ref`` in a schema can reach."""
    out: dict[str, Any] = {}
    made = {id(out)}  # the dicts built here (the others are the document's own: never written)
    for ref in document.refs:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in ref[2:].split("/")[:3]]
        if not ref.startswith("#/") or parts[:2] == ["components", "examples"]:
            continue
        source: Any = document.data
        target = out
        for index, part in enumerate(parts):
            if not isinstance(source, Mapping) or part not in source:
                break
            source = source[part]
            if index == len(parts) - 1:
                target[part] = source
            else:
                if part not in target:
                    target[part] = {}
                    made.add(id(target[part]))
                target = target[part]
                if id(target) not in made:
                    break
    return out


@functools.lru_cache(maxsize=1024)
def cached_linear(pattern: str) -> Linear | None:
    try:
        return linear(pattern)
    except Exception:
        return None


def linear_pattern(
    validator: Any, pattern: str, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    """jsonschema's ``pattern`` keyword, matched by RE2: linear in the agent's string."""
    from jsonschema.exceptions import ValidationError  # noqa: PLC0415

    if not isinstance(instance, str) or not isinstance(pattern, str):
        return
    compiled = cached_linear(pattern)
    if compiled is not None and compiled.search(instance) is None:
        yield ValidationError(f"does not match {pattern!r}")


def _linear_pattern_properties(
    validator: Any, patterns: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    """jsonschema's ``patternProperties``, its patterns matched by RE2 (the keys are the
    agent's)."""
    if not isinstance(instance, Mapping) or not isinstance(patterns, Mapping):
        return
    for pattern, subschema in patterns.items():
        compiled = cached_linear(str(pattern))
        for key, value in instance.items():
            if compiled is not None and compiled.search(str(key)) is not None:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _linear_additional(original: Any) -> Any:
    """``additionalProperties`` as the dialect has it, except beside ``patternProperties``,
    where the properties the patterns cover are found by RE2, not ``re``."""
    from jsonschema.exceptions import ValidationError  # noqa: PLC0415

    def keyword(validator: Any, extra: Any, instance: Any, schema: Any) -> Any:
        patterns = schema.get("patternProperties") if isinstance(schema, Mapping) else None
        if not patterns or not isinstance(instance, Mapping):
            yield from original(validator, extra, instance, schema)
            return
        compiled = [c for c in (cached_linear(str(p)) for p in patterns) if c is not None]
        known = schema.get("properties") or {}
        extras = [
            k for k in instance if k not in known and not any(c.search(str(k)) for c in compiled)
        ]
        if isinstance(extra, Mapping):
            for key in extras:
                yield from validator.descend(instance[key], extra, path=key)
        elif extra is False and extras:
            names = ", ".join(repr(k) for k in sorted(map(str, extras))[:20])
            yield ValidationError(f"Additional properties are not allowed ({names} unexpected)")

    return keyword


def for_rs(node: Any, nullable: bool, depth: int = 0) -> Any:
    """A schema (or document part) as jsonschema-rs's draft reads what OpenAPI means by it:
    with ``nullable`` (3.0), ``nullable: true`` becomes ``null`` in ``type`` and ``enum``, and
    beside ``oneOf``/``anyOf``/``allOf`` an alternative of its own (GitHub's ``nullable: true,
    allOf: [{$ref}]``); ``format: int32``/``int64`` become the range they name."""
    if depth > 64:
        return node
    if isinstance(node, list):
        return [for_rs(v, nullable, depth + 1) for v in node]
    if not isinstance(node, Mapping):
        return node
    out = {k: for_rs(v, nullable, depth + 1) for k, v in node.items()}
    fmt = out.get("format")
    bounds = _INT_FORMATS.get(fmt) if isinstance(fmt, str) else None
    if bounds is not None:
        out.setdefault("minimum", bounds[0])
        out.setdefault("maximum", bounds[1])
    if nullable and out.get("nullable") is True:
        kind = out.get("type")
        if isinstance(kind, str):
            out["type"] = [kind, "null"]
        if isinstance(out.get("enum"), list) and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
        if any(k in out for k in NULLABLE_BESIDE if k != "enum"):
            rest = {k: v for k, v in out.items() if k != "nullable"}
            return {"anyOf": [{"type": "null"}, rest]}
    return out


def nullable_aware(original: Any) -> Any:
    """An OpenAPI 3.0 keyword that lets ``null`` through where the schema says ``nullable``."""

    def keyword(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        if instance is None and isinstance(schema, Mapping) and schema.get("nullable") is True:
            return
        yield from original(validator, value, instance, schema)

    return keyword


def _is_base64(value: str) -> bool:
    """OpenAPI's ``format: byte``: base64 (RFC 4648), padded."""
    try:
        binascii.a2b_base64(value.encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        return False
    return True


#: Formats OpenAPI names that jsonschema-rs does not know (it checks date, date-time, email...).
RS_FORMATS = {"byte": _is_base64}
