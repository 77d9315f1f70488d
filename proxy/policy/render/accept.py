"""The ``Accept`` header read into media ranges (RFC 9110 §12.5.1), one way for every caller.

A malformed range is skipped, never an error (a client is better served by some answer than by a
406); a bare ``*`` (old Java clients) is ``*/*``; ``q`` outside 0..1 makes its range malformed; a
parameter after ``q`` is an accept-ext and means nothing here. At most ``MAX_RANGES`` ranges are
read, which bounds the work one hostile header can cause. The envelope's renderings
(``render.py``) and the error catalog's HTML or JSON (``proxy/edge/catalog.py``) choose from these.
"""

from __future__ import annotations

import re
from typing import NamedTuple

#: Ranges read from one header; real clients send a handful.
MAX_RANGES = 64
_QVALUE = re.compile(r"\d+(?:\.\d*)?|\.\d+")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9a-z-]+")


class MediaRange(NamedTuple):
    """One range of the header: ``type/subtype`` (lower case, ``*`` for a wildcard) and its q."""

    kind: str
    subtype: str
    q: float

    def specificity(self, kind: str, subtype: str) -> int | None:
        """How exactly this range names ``kind/subtype``: 2 itself, 1 ``kind/*``, 0 ``*/*``;
        ``None`` when it does not cover it."""
        if self.kind == kind and self.subtype == subtype:
            return 2
        if self.kind == kind and self.subtype == "*":
            return 1
        if self.kind == "*":
            return 0
        return None


def split_unquoted(text: str, sep: str) -> list[str]:
    """Split on ``sep`` outside quoted-strings, so ``a="x,y"`` stays one parameter."""
    if '"' not in text:
        return text.split(sep)
    parts: list[str] = []
    start = 0
    quoted = escaped = False
    for i, char in enumerate(text):
        if escaped:
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == sep and not quoted:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _parse_range(text: str) -> MediaRange | None:
    """``type/subtype;params`` -> (type, subtype, q); ``None`` when malformed."""
    pieces = split_unquoted(text, ";")
    media = pieces[0].strip().lower()
    if media == "*":  # old Java clients send a bare "*"
        media = "*/*"
    kind, slash, subtype = media.partition("/")
    kind, subtype = kind.strip(), subtype.strip()
    if not slash or not _TOKEN.fullmatch(kind) or not _TOKEN.fullmatch(subtype):
        return None
    if kind == "*" and subtype != "*":
        return None
    q = 1.0
    for param in pieces[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() != "q":
            continue  # media-type parameters (charset, ...) do not change what we can send
        value = value.strip()
        if not _QVALUE.fullmatch(value):
            return None
        q = float(value)
        if q > 1.0:
            return None
        break  # anything after q is accept-ext, which has no meaning here
    return MediaRange(kind, subtype, q)


def media_ranges(accept: str) -> tuple[MediaRange, ...]:
    """The well-formed ranges of ``accept``, in the header's order."""
    return tuple(
        parsed
        for raw in split_unquoted(accept, ",")[:MAX_RANGES]
        if raw.strip() and (parsed := _parse_range(raw)) is not None
    )
