"""RFC 6901 JSON Pointers from the many ways upstreams name a field.

Frameworks spell a field location as a list (`["body", "items", 0, "qty"]`, FastAPI), a dotted
path (`items.0.qty`, Laravel), a bracketed path (`items[0].qty`, Spring), or already a pointer.
Agents get one spelling: a pointer into the request body or query.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

_SEGMENTS = re.compile(r"[^.\[\]]+")
#: Leading segments that say where a field lives, not which field it is.
LOCATION_PREFIXES = ("body", "query", "path", "header", "cookie", "form", "json", "params")


def _escape(segment: str) -> str:
    return segment.replace("~", "~0").replace("/", "~1")


def from_segments(segments: Iterable[object], strip: Sequence[str] = ()) -> str:
    parts = [str(s) for s in segments]
    while len(parts) > 1 and parts[0] in strip:
        parts.pop(0)
    return "".join("/" + _escape(p) for p in parts)


def to_pointer(value: object, strip: Sequence[str] = LOCATION_PREFIXES) -> str | None:
    """A JSON Pointer for ``value``, or ``None`` when it names no field."""
    if value is None:
        return None
    if isinstance(value, list | tuple):
        return from_segments(value, strip) if value else None
    text = str(value).strip()
    if not text or text in {"__all__", "non_field_errors", "$"}:
        return None
    if text.startswith("/"):
        return text
    if text.startswith("$."):
        text = text[2:]
    return from_segments(_SEGMENTS.findall(text), strip)
