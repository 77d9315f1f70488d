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


#: What each failed keyword asks, ``{}`` standing for the schema's value (as ``echo`` shows it).
_REASONS = {
    "enum": "must be one of the values in allowed_values.enum",
    "const": "must be {!r}",
    "type": "must be of type {}",
    "format": "must be a valid {}",
    "pattern": "must match the pattern {}",
    "minimum": "must be at least {}",
    "maximum": "must be at most {}",
    "exclusiveMinimum": "must be greater than {}",
    "exclusiveMaximum": "must be less than {}",
    "multipleOf": "must be a multiple of {}",
    "minLength": "must be at least {} characters long",
    "maxLength": "must be at most {} characters long",
    "minItems": "must have at least {} items",
    "maxItems": "must have at most {} items",
    "uniqueItems": "must not repeat items",
    "oneOf": "must match exactly one of the documented alternatives",
    "anyOf": "must match one of the documented alternatives",
    "nullable": "must not be null",
}


def reason_for(keyword: str, value: Any) -> str:
    reason = _REASONS.get(keyword)
    if reason is None:
        return f"does not satisfy the schema's {keyword[:40]}"
    return reason.format(echo(value)) if "{" in reason else reason


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
