"""JSON that never raises: surrogates mapped, big integers exact, NaN and infinities null."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import orjson

_SURROGATE = re.compile("[\ud800-\udfff]")


def unsurrogate(text: str) -> str:
    """Pairs of surrogates become the character they encode, lone ones U+FFFD.

    Python strings hold surrogates only when bytes were decoded with ``surrogateescape``; no
    encoder may write them as they are (strict UTF-8 refuses, and many JSON parsers reject a
    lone ``\\ud800`` escape), so every rendering maps them the same way.
    """
    if not _SURROGATE.search(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _jsonable(value: Any) -> Any:
    if isinstance(value, str):
        return unsurrogate(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {_jsonable(str(k)): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def json_bytes(value: Any) -> bytes:
    """Compact JSON of ``value`` (a parsed upstream document included); never raises."""
    try:
        return orjson.dumps(value)
    except TypeError:
        # orjson refuses integers beyond 64 bits and surrogates, both of which can come from an
        # upstream; the stdlib writes big integers exactly once surrogates are mapped.
        text = json.dumps(
            _jsonable(value),
            ensure_ascii=False,
            separators=(",", ":"),
            default=str,
            allow_nan=False,
        )
        return text.encode("utf-8")


def json_text(value: Any) -> str:
    return json_bytes(value).decode("utf-8")
