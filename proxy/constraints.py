"""What an agent may send instead, read from a validation message.

Frameworks say "ensure this value is less than or equal to 100", "must be one of: a, b",
"Input should be greater than 0". Turning those into ``allowed_values`` (JSON-Schema-like keywords)
and a ``suggested_value`` lets an agent repair a request without guessing.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

_NUM = r"(-?\d+(?:\.\d+)?)"
_BOUNDS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.I), key)
    for p, key in (
        (
            rf"(?:greater than or equal to|at least|no less than|>=|minimum(?: value)?(?: is| of)?)\s*{_NUM}(?!\s*(?:char|item|element|byte))",
            "minimum",
        ),
        (
            rf"(?:less than or equal to|at most|no (?:more|greater) than|not exceed|<=|maximum(?: value)?(?: is| of)?)\s*{_NUM}(?!\s*(?:char|item|element|byte))",
            "maximum",
        ),
        (
            rf"(?:greater than|more than|>|above)\s*{_NUM}(?!\s*(?:char|item|element|byte))",
            "exclusiveMinimum",
        ),
        (
            rf"(?:less than|fewer than|<|below)\s*{_NUM}(?!\s*(?:char|item|element|byte))",
            "exclusiveMaximum",
        ),
        (
            rf"(?:at least|minimum of|no fewer than|min(?:imum)? length(?: of| is)?)\s*{_NUM}\s*char",
            "minLength",
        ),
        (
            rf"(?:at most|no more than|maximum of|max(?:imum)? length(?: of| is)?)\s*{_NUM}\s*char",
            "maxLength",
        ),
        (rf"(?:at least|no fewer than)\s*{_NUM}\s*(?:item|element)", "minItems"),
        (rf"(?:at most|no more than)\s*{_NUM}\s*(?:item|element)", "maxItems"),
    )
)
_ENUM = re.compile(
    r"(?:one of|must be either|permitted(?: values)?(?: are)?|allowed values?(?: are)?|"
    r"valid (?:values|options|choices) (?:are|is)|expected(?: one of)?)\s*[:\-]?\s*(.+)$",
    re.I,
)
_ENUM_ITEM = re.compile(r"""['"`]([^'"`]{1,64})['"`]|([\w.\-]{1,64})""")
_CTX_KEYS = {
    "gt": "exclusiveMinimum",
    "ge": "minimum",
    "lt": "exclusiveMaximum",
    "le": "maximum",
    "min_length": "minLength",
    "max_length": "maxLength",
    "expected": "enum",
    "limit_value": None,
    "pattern": "pattern",
}


def _number(text: str) -> int | float:
    value = float(text)
    return int(value) if value.is_integer() else value


def _enum_values(text: str) -> list[str]:
    text = text.strip().rstrip(".")
    values = []
    for quoted, bare in _ENUM_ITEM.findall(text):
        value = quoted or bare
        if value.lower() in {"or", "and", "but", "got", "received", "not"}:
            continue
        values.append(value)
    return values[:50]


def from_reason(reason: str) -> dict[str, Any] | None:
    """Allowed values named by a human-readable validation message, or ``None``."""
    found: dict[str, Any] = {}
    for pattern, key in _BOUNDS:
        if (match := pattern.search(reason)) and not any(
            k in found for k in (key, key.replace("exclusiveM", "m"))
        ):
            found[key] = _number(match.group(1))
    if not found and (match := _ENUM.search(reason)):
        values = _enum_values(match.group(1))
        if len(values) >= 2 or "one of" in reason.lower():
            found["enum"] = values
    return found or None


def from_context(ctx: Any) -> dict[str, Any] | None:
    """Allowed values from a structured context (pydantic's ``ctx``: ``{"gt": 0}``)."""
    if not isinstance(ctx, dict):
        return None
    out: dict[str, Any] = {}
    for key, value in ctx.items():
        mapped = _CTX_KEYS.get(key)
        if mapped == "enum" and isinstance(value, str):
            out["enum"] = _enum_values(value)
        elif mapped and isinstance(value, int | float | str):
            out[mapped] = value
    return out or None


def normalise(allowed: dict[str, Any], received: Any = None) -> dict[str, Any]:
    """Prefer inclusive bounds for integers: ``> 0`` becomes ``minimum: 1``, as agents expect."""
    out = dict(allowed)
    integral = isinstance(received, int) or received is None
    for exclusive, inclusive, step in (
        ("exclusiveMinimum", "minimum", 1),
        ("exclusiveMaximum", "maximum", -1),
    ):
        bound = out.get(exclusive)
        if isinstance(bound, int) and integral and inclusive not in out:
            out[inclusive] = bound + step
            del out[exclusive]
    return out


def suggest(allowed: dict[str, Any] | None, received: Any = None) -> Any:
    """A value inside ``allowed``, as close to what was sent as the constraint lets us say."""
    if not allowed:
        return None
    enum = allowed.get("enum")
    if isinstance(enum, list) and enum:
        if isinstance(received, str):
            lowered = {str(v).lower(): v for v in enum}
            if received.lower() in lowered:
                return lowered[received.lower()]
            close = difflib.get_close_matches(received, [str(v) for v in enum], n=1, cutoff=0.5)
            if close:
                return close[0]
        return enum[0]
    low, high = allowed.get("minimum"), allowed.get("maximum")
    if isinstance(received, int | float) and not isinstance(received, bool):
        if isinstance(low, int | float) and received < low:
            return low
        if isinstance(high, int | float) and received > high:
            return high
        return None
    if isinstance(low, int | float):
        return low
    if isinstance(high, int | float):
        return high
    return None
