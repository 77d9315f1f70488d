"""What a schema says an agent may send: its constraints as ``allowed_values``, a value to
suggest instead of what was sent, and a minimal valid example.

``allowed_values`` uses the schema's own keywords (``enum``, ``minimum``, ``maxLength``,
``pattern``, ``format``, ``type``...), the vocabulary ``proxy/policy/envelope/constraints.py`` reads
from upstream messages, so an agent sees one language whichever said it.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from typing import Any

from proxy.policy.openapi.document import Document

#: The keywords copied into ``allowed_values``.
FACT_KEYWORDS = (
    "type",
    "enum",
    "const",
    "format",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "uniqueItems",
    "required",
    "nullable",
)
#: Enum values listed at most (a generated document may enumerate thousands of codes).
MAX_ENUM = 100
#: Levels walked down a schema or an example (cycles in $refs end here too).
MAX_DEPTH = 16


def combined(schema: Any, document: Document) -> dict[str, Any]:
    """``schema`` resolved, with the facts of its ``allOf`` members merged in."""
    schema = document.deref(schema)
    if not isinstance(schema, Mapping):
        return {}
    out = dict(schema)
    for member in schema.get("allOf") or ():
        for key, value in combined(member, document).items():
            if key == "properties" and isinstance(value, Mapping):
                out["properties"] = {**value, **(out.get("properties") or {})}
            elif key == "required" and isinstance(value, list):
                out["required"] = [*(out.get("required") or []), *value]
            else:
                out.setdefault(key, value)
    return out


def allowed_values(schema: Any, document: Document) -> dict[str, Any] | None:
    """The constraints of ``schema`` an agent can act on; ``None`` when it states none."""
    resolved = combined(schema, document)
    out: dict[str, Any] = {}
    for key in FACT_KEYWORDS:
        if key in resolved:
            value = resolved[key]
            if key == "enum" and isinstance(value, list):
                value = value[:MAX_ENUM]
            out[key] = value
    if "enum" not in out and "const" in out:
        out["enum"] = [out.pop("const")]
    for key in ("anyOf", "oneOf"):
        members = resolved.get(key)
        if isinstance(members, list) and "enum" not in out:
            enums = [
                v for m in members for v in (allowed_values(m, document) or {}).get("enum", [])
            ]
            if enums:
                out["enum"] = enums[:MAX_ENUM]
    return out or None


def child(schema: Any, segment: str, document: Document) -> Any | None:
    """The schema of ``segment`` (a property name or an index) inside ``schema``."""
    resolved = combined(schema, document)
    properties = resolved.get("properties")
    if isinstance(properties, Mapping) and segment in properties:
        return properties[segment]
    items = resolved.get("items")
    if segment.isdigit() or segment == "-":
        prefix = resolved.get("prefixItems")
        if isinstance(prefix, list) and segment.isdigit() and int(segment) < len(prefix):
            return prefix[int(segment)]
        if items is not None and not isinstance(items, bool):
            return items[0] if isinstance(items, list) and items else items
    extra = resolved.get("additionalProperties")
    if isinstance(extra, Mapping):
        return extra
    for key in ("anyOf", "oneOf"):
        for member in resolved.get(key) or ():
            found = child(member, segment, document)
            if found is not None:
                return found
    return None


def at_pointer(schema: Any, segments: list[str], document: Document) -> Any | None:
    for segment in segments[:MAX_DEPTH]:
        schema = child(schema, segment.replace("~1", "/").replace("~0", "~"), document)
        if schema is None:
            return None
    return schema


def suggest(allowed: Mapping[str, Any] | None, received: Any) -> Any:
    """A value the constraints allow, as near to ``received`` as they let us say; ``None`` when
    none can be chosen (a pattern, a format)."""
    if not allowed:
        return None
    enum = allowed.get("enum")
    if isinstance(enum, list) and enum:
        return _nearest(enum, received)
    if isinstance(received, bool):
        return None
    if isinstance(received, int | float):
        return _clamped(allowed, received)
    if isinstance(received, str):
        return _sized(allowed, received)
    return None


def _nearest(enum: list[Any], received: Any) -> Any:
    """The enum value equal but for case, else the closest by edit distance, else the first."""
    if received in enum:
        return received
    if isinstance(received, str):
        folded = received[:128].casefold()  # difflib is quadratic: the agent's string is cut
        for value in enum:
            if isinstance(value, str) and value.casefold() == folded:
                return value
        strings = [v for v in enum if isinstance(v, str)]
        close = difflib.get_close_matches(folded, [s.casefold() for s in strings], n=1, cutoff=0.4)
        if close:
            return next(s for s in strings if s.casefold() == close[0])
    return enum[0]


def _clamped(allowed: Mapping[str, Any], received: float) -> Any:
    integral = allowed.get("type") == "integer" or isinstance(received, int)
    low: Any = allowed.get("minimum")
    high: Any = allowed.get("maximum")
    step = 1 if integral else 0
    xlow: Any = allowed.get("exclusiveMinimum")
    xhigh: Any = allowed.get("exclusiveMaximum")
    if _number(xlow) and step:
        low = xlow + step if not _number(low) else max(low, xlow + step)
    if _number(xhigh) and step:
        high = xhigh - step if not _number(high) else min(high, xhigh - step)
    if _number(low) and received < low:
        return _whole(low, math.ceil) if integral else low  # an integer field's, an integer
    if _number(high) and received > high:
        return _whole(high, math.floor) if integral else high
    if allowed.get("type") == "integer" and isinstance(received, float) and math.isfinite(received):
        return round(received)
    return None


def _whole(bound: Any, to_int: Callable[[float], int]) -> Any:
    """``bound`` as an integer field's value (``10.0`` is ``10``; a maximum ``9.5``, ``9``)."""
    return to_int(bound) if isinstance(bound, float) and math.isfinite(bound) else bound


def _sized(allowed: Mapping[str, Any], received: str) -> Any:
    low, high = allowed.get("minLength"), allowed.get("maxLength")
    if isinstance(high, int) and len(received) > high:
        return received[:high]
    if allowed.get("type") in ("integer", "number"):
        try:
            number = float(received)
        except ValueError:
            return None
        if not math.isfinite(number):  # "nan", "inf": no number near it to offer
            return None
        value: int | float = int(number) if number.is_integer() else number
        clamped = _clamped(allowed, value)
        return clamped if clamped is not None else value
    if allowed.get("type") == "boolean" and received.lower() in ("true", "false"):
        return received.lower() == "true"
    del low  # a string too short cannot be lengthened without inventing content
    return None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def documented_example(schema: Any, document: Document) -> Any:
    """The value the schema itself gives as an example (``example``, ``examples[0]``,
    ``default``), or ``None``: nothing is made up here (``example`` builds one)."""
    resolved = combined(schema, document)
    if "example" in resolved:
        return resolved["example"]
    examples = resolved.get("examples")
    if isinstance(examples, list) and examples:
        return examples[0]
    return resolved.get("default")


def example(schema: Any, document: Document, depth: int = 0) -> Any:
    """A minimal valid value: the schema's example or default, else one built from its type with
    only the required properties."""
    resolved = combined(schema, document)
    for key in ("example", "default", "const"):
        if key in resolved:
            return resolved[key]
    examples = resolved.get("examples")
    if isinstance(examples, list) and examples:
        return examples[0]
    if isinstance(resolved.get("enum"), list) and resolved["enum"]:
        return resolved["enum"][0]
    for key in ("oneOf", "anyOf"):
        members = resolved.get(key)
        if isinstance(members, list) and members:
            return example(members[0], document, depth + 1)
    kind = resolved.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if depth >= MAX_DEPTH:
        return None
    builder = _BUILDERS.get(str(kind)) if kind else _guess(resolved)
    return builder(resolved, document, depth) if builder else None


def _object(schema: Mapping[str, Any], document: Document, depth: int) -> Any:
    properties = schema.get("properties") or {}
    required = [r for r in schema.get("required") or () if isinstance(r, str)]
    return {name: example(properties.get(name, {}), document, depth + 1) for name in required[:50]}


def _array(schema: Mapping[str, Any], document: Document, depth: int) -> Any:
    count = schema.get("minItems", 0)
    items = schema.get("items", {})
    count = count if isinstance(count, int) and 0 <= count <= 10 else 0
    return [example(items, document, depth + 1) for _ in range(max(count, 1 if count else 0))]


def _integer(schema: Mapping[str, Any], document: Document, depth: int) -> Any:
    value = _clamped({**schema, "type": "integer"}, 0)
    return 0 if value is None else value


def _numeric(schema: Mapping[str, Any], document: Document, depth: int) -> Any:
    value = _clamped(schema, 0)
    return 0 if value is None else value


_FORMATS = {
    "date": "2024-01-31",
    "date-time": "2024-01-31T12:00:00Z",
    "email": "agent@example.com",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "uri": "https://example.com/",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "hostname": "example.com",
}


def _string(schema: Mapping[str, Any], document: Document, depth: int) -> Any:
    fmt = schema.get("format")
    if isinstance(fmt, str) and fmt in _FORMATS:
        return _FORMATS[fmt]
    low, high = schema.get("minLength", 0), schema.get("maxLength")
    low = low if isinstance(low, int) and 0 <= low <= 64 else 0
    if low <= 6 and (not isinstance(high, int) or high >= 6):
        return "string"
    return "x" * max(low, 1 if not isinstance(high, int) or high >= 1 else 0)


_BUILDERS: dict[str, Callable[[Mapping[str, Any], Document, int], Any]] = {
    "object": _object,
    "array": _array,
    "integer": _integer,
    "number": _numeric,
    "string": _string,
    "boolean": lambda s, d, n: False,
    "null": lambda s, d, n: None,
}


def _guess(schema: Mapping[str, Any]) -> Callable[[Mapping[str, Any], Document, int], Any] | None:
    if "properties" in schema or "required" in schema:
        return _object
    if "items" in schema:
        return _array
    return None
