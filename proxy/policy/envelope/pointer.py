"""RFC 6901 JSON Pointers from the many ways upstreams name a field.

Frameworks spell a field location as a list (`["body", "items", 0, "qty"]`, FastAPI), a dotted
path (`items.0.qty`, Laravel), a bracketed path (`items[0].qty`, Spring), a JSONPath (`$.qty`,
ASP.NET), a slash path (`body/qty`, Fastify/ajv), a URI fragment (`#/qty`, RFC 9457), or only
inside a sentence (`qty must not be less than 1`, class-validator). Agents get one spelling: a
pointer into the request body or query, and where the field is (``location``) when the upstream's
spelling says it (a leading ``body``/``query``/``path``/``header`` segment, Prism's "Request
query ...").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

_SEGMENTS = re.compile(r"[^.\[\]/'\"]+")
_COMPOUND = re.compile(r"[.\[\]]|^\$")
#: Leading segments that say where a field lives, not which field it is.
LOCATION_PREFIXES = (
    "body",
    "query",
    "querystring",
    "path",
    "params",
    "header",
    "headers",
    "cookie",
    "form",
    "json",
)
#: Where a leading location segment says the field is (docs/contract.md §1 ``location``).
LOCATIONS = {
    "body": "body",
    "json": "body",
    "form": "body",
    "query": "query",
    "querystring": "query",
    "path": "path",
    "params": "path",
    "header": "header",
    "headers": "header",
    "cookie": "cookie",
}
#: A pointer and where it is (``None``: the spelling did not say).
Located = tuple[str, str | None]
#: Names that stand for "the request as a whole", not a field of it.
_WHOLE = frozenset({"", "$", "__all__", "non_field_errors", "nonFieldErrors"})

# A field named only inside a validation sentence. Only text with whitespace in it is read this way
# (no real field path contains a space), so these never change how a plain path is read.
_FIELD = r"[A-Za-z_$][\w$.\[\]/-]*"
_SENTENCES = (
    # ajv / Fastify: "body/items/0 must have required property 'sku'"
    re.compile(rf"^(?P<parent>{_FIELD})?\s*must have required property '(?P<field>[^']+)'"),
    # Stoplight Prism: "Request body property category must have required property 'name'"
    re.compile(
        r"^Request (?P<location>body|query|path|header)s?(?: (?:property|parameter) "
        rf"(?P<parent>{_FIELD}))? must have required property '(?P<field>[^']+)'"
    ),
    # go-playground/validator: "Key: 'CreateOrder.Items[0].Qty' Error:Field validation ..."
    re.compile(rf"^Key: '(?:\w+\.)?(?P<field>{_FIELD})' Error:"),
    # ASP.NET / Laravel: "The field Qty must be ...", "The items.0.qty field is required."
    re.compile(rf"^The field (?P<field>{_FIELD}) "),
    re.compile(rf"^The (?P<field>{_FIELD}) field\b"),
    # class-validator, Joi, ajv, Zod: "qty must ...", '"qty" must ...', "body/qty must be >= 1"
    re.compile(
        rf"^[\"'`]?(?P<field>{_FIELD})[\"'`]?:?\s+(?:must|should|is|are|has|have|cannot|can't|"
        r"may|does|do|needs?|expected|contains?|was|were|requires?|not)\b"
    ),
)


def escape_segment(segment: str) -> str:
    """One JSON Pointer reference token (RFC 6901 §3: ``~`` as ``~0``, ``/`` as ``~1``)."""
    return segment.replace("~", "~0").replace("/", "~1")


def _split(segment: object) -> list[str]:
    """One segment, or the several a dotted/bracketed/JSONPath string segment stands for."""
    text = str(segment)
    if isinstance(segment, str) and _COMPOUND.search(text):
        return [p for p in _SEGMENTS.findall(text.removeprefix("$")) if p != "$"]
    return [text]


def from_segments(segments: Iterable[object], strip: Sequence[str] = ()) -> str | None:
    """``["body", "items", 0, "qty"]`` -> ``/items/0/qty``; ``None`` when it names no field."""
    found = _segments_located(segments, strip)
    return None if found is None else found[0]


def _segments_located(
    segments: Iterable[object], strip: Sequence[str], whole: bool = False
) -> Located | None:
    """``from_segments`` with the location the stripped leading segments name (the last one:
    Prism's ``["request", "query", "limit"]`` is in the query). ``whole``: a list that is all
    location (Prism's ``["body"]``: "Request body must be object") is that location as a whole,
    the root pointer ``""``; a string ``body`` is a field of that name."""
    parts = [p for s in segments for p in _split(s)]
    while parts and parts[-1] in _WHOLE:
        parts.pop()  # DRF's nested non_field_errors belong to the object they sit in
    location = None
    # up to the first location only: Prism's [request, body, body] is the body member "body"
    while len(parts) > 1 and parts[0] in strip and location is None:
        location = LOCATIONS.get(parts.pop(0))
    if not parts:
        return None
    if whole and location is None and len(parts) == 1 and parts[0] in strip:
        if parts[0] not in LOCATIONS:
            return None  # Prism's ["request"]: the request as a whole, no field of it
        return "", LOCATIONS[parts[0]]
    return "".join("/" + escape_segment(p) for p in parts), location


def _from_sentence(text: str, strip: Sequence[str]) -> Located | None:
    for pattern in _SENTENCES:
        if match := pattern.match(text):
            groups = match.groupdict()
            location = LOCATIONS.get(groups.get("location") or "")
            parent = _path_segments(groups.get("parent") or "")
            found = _segments_located(parent, strip) if parent else None
            if found is not None:
                location = found[1] or location
                if found[0].lstrip("/") in strip:
                    # "body must have required property 'sku'": the body itself
                    location = LOCATIONS.get(found[0].lstrip("/"), location)
                    found = None
            field = _segments_located(_path_segments(groups["field"]), strip)
            if field is None:
                return None
            return (found[0] if found else "") + field[0], location or field[1]
    return None


def _path_segments(text: str) -> list[str]:
    text = text.strip()
    if text.startswith("$"):
        text = text[1:]
    return _SEGMENTS.findall(text)


#: Pointers remembered by what named them and the prefixes stripped (errors repeat: the same
#: locations come again and again); past this many the table starts again.
POINTERS_MAX = 4096
#: A location of more characters than this (or more than a sixteenth as many segments) is read,
#: not remembered: the table holds a few megabytes at most, whatever upstreams send.
_KEY_MAX = 256
_POINTERS: dict[tuple[object, object], Located | None] = {}


def _memo_key(value: object) -> object:
    """``value`` as a key that tells apart every location it could be confused with, or
    ``None`` when it is not worth remembering (too long, or not strings and integers)."""
    kind = type(value)
    if kind is str and isinstance(value, str):
        return value if len(value) <= _KEY_MAX else None
    if (kind is list or kind is tuple) and isinstance(value, (list, tuple)):
        if len(value) > _KEY_MAX // 16:
            return None
        listed = kind is list
        size = 0
        for segment in value:
            # True == 1 and 1 == 1.0 name different fields: only exact str and int are keys
            kind = type(segment)
            if kind is str:
                size += len(segment)
            elif kind is not int:
                return None
        # a list and a tuple of the same segments are read apart (``_located``)
        return (listed, tuple(value)) if size <= _KEY_MAX else None
    return None


def to_pointer(value: object, strip: Sequence[str] = LOCATION_PREFIXES) -> str | None:
    """A JSON Pointer for ``value``, or ``None`` when it names no field."""
    found = located(value, strip)
    return None if found is None else found[0]


def located(value: object, strip: Sequence[str] = LOCATION_PREFIXES) -> Located | None:
    """``to_pointer`` and where the spelling says the field is (``body``, ``query``, ``path``,
    ``header``, ``cookie``; ``None`` when it does not); each location is read once
    (``POINTERS_MAX``)."""
    key = _memo_key(value)
    if key is None or type(strip) is not tuple:
        return _located(value, strip)
    memo = (key, strip)
    try:
        return _POINTERS[memo]
    except KeyError:
        found = _POINTERS[memo] = _located(value, strip)
        if len(_POINTERS) > POINTERS_MAX:
            _POINTERS.clear()
        return found


def _located(value: object, strip: Sequence[str]) -> Located | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, list | tuple):
        # a JSON array is the upstream's location list (Prism's ``["body"]``: the body); a tuple
        # is an object's keys flattened (``{"query": [...]}``: a field named query)
        return _segments_located(value, strip, whole=type(value) is list) if value else None
    text = str(value).strip()
    if text.startswith("#/"):
        text = text[1:]  # a URI fragment holding a pointer (RFC 9457's example)
    if text in _WHOLE:
        return None
    if any(c.isspace() for c in text):
        return _from_sentence(text, strip)
    if text.startswith("/"):
        return text, None  # a pointer already, into the request as sent
    return _segments_located(_path_segments(text), strip)
