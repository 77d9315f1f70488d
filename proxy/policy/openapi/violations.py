"""What a refused request is told: each violation's pointer, reason, what was sent and allowed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.policy.shorten import shortened


@dataclass(frozen=True, slots=True)
class Violation:
    pointer: str
    location: str  # body, query, path, header
    reason: str
    received: Any
    allowed_values: dict[str, Any] | None
    suggested_value: Any


#: Characters of a received string echoed back; bytes of a received object or array.
_ECHO_CHARS = 256


def reason_for(keyword: str, value: Any) -> str:
    shown = echo(value)
    reasons = {
        "enum": "must be one of the values in allowed_values.enum",
        "const": f"must be {shown!r}",
        "type": f"must be of type {shown}",
        "format": f"must be a valid {shown}",
        "pattern": f"must match the pattern {shown}",
        "minimum": f"must be at least {shown}",
        "maximum": f"must be at most {shown}",
        "exclusiveMinimum": f"must be greater than {shown}",
        "exclusiveMaximum": f"must be less than {shown}",
        "multipleOf": f"must be a multiple of {shown}",
        "minLength": f"must be at least {shown} characters long",
        "maxLength": f"must be at most {shown} characters long",
        "minItems": f"must have at least {shown} items",
        "maxItems": f"must have at most {shown} items",
        "uniqueItems": "must not repeat items",
        "oneOf": "must match exactly one of the documented alternatives",
        "anyOf": "must match one of the documented alternatives",
        "nullable": "must not be null",
    }
    return reasons.get(keyword, f"does not satisfy the schema's {keyword[:40]}")


def echo(value: Any) -> Any:
    """What was sent, as short as an envelope can carry it."""
    if isinstance(value, str):
        return shortened(value, _ECHO_CHARS)
    if isinstance(value, Mapping | list):
        # a small flat container only: a deep or long one is not echoed (nor measured)
        items = value.values() if isinstance(value, Mapping) else value
        if len(value) > 16 or any(
            isinstance(v, Mapping | list) or (isinstance(v, str) and len(v) > 64) for v in items
        ):
            return None
        try:
            size = len(orjson.dumps(value))
        except (TypeError, orjson.JSONEncodeError):
            return None
        return value if size <= _ECHO_CHARS else None
    return value


def escape_pointer(segment: str) -> str:
    return segment.replace("~", "~0").replace("/", "~1")
