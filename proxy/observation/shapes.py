"""Error answers only a built-in fallback explained, kept by shape for the operator (issue 40).

An operator's work with mend is rules; the errors worth a rule are the ones no pack knew, which
only a ``fallback.*`` rule answered. Each is kept here by its *shape*, not its bytes: the route,
the status, the media type, and the body's structure (a JSON body's key paths and value types, an
HTML page's title, a text body's first line), with the variable parts masked (numbers, ids,
quoted values), so a thousand "order 123 not found" answers are one shape counted a thousand
times. Each shape keeps one sample, masked as the log line masks bodies (secrets out, the rest
for the operator), cut to ``ShapeLimits.sample_chars``.

The book is bounded: ``max_shapes`` in all and ``max_per_route`` per route; a new shape past a cap
pushes out the one seen least recently. With ``--workers``, each worker's book is written to a
file the supervisor merges (``dump`` / ``merge``).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from proxy.policy.regex import Linear, deferred

#: the JSON structure is read this deep, and this many key paths at most
MAX_DEPTH = 3
MAX_PATHS = 24
#: characters of a text body's first line, and of an HTML title, kept in a shape
MAX_LINE_CHARS = 120
#: headers that may state what a rule reads (a wait, a budget, a challenge), kept with a sample:
#: by name, or by how the name starts (lower case; a name is a token, so no pattern is needed,
#: and a set look-up costs a tenth of an RE2 match on every header of every error)
_SAMPLE_NAMES = frozenset(
    {"retry-after", "www-authenticate", "content-type", "x-request-id", "allow"}
)
_SAMPLE_PREFIXES = (
    "x-ratelimit",
    "xratelimit",
    "x-rate-limit",
    "xrate-limit",
    "ratelimit",
    "x-error",
)

# the variable parts of a line, masked so answers that differ only in them are one shape
_MASKS: tuple[tuple[Linear, str], ...] = (
    (deferred(r'"[^"]{0,200}"|\'[^\']{0,200}\''), '"..."'),
    (
        deferred(r"(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"),
        "<id>",
    ),
    (deferred(r"(?i)\b[0-9a-f]{12,}\b"), "<id>"),
    (deferred(r"\d+(?:[.:]\d+)*"), "<n>"),
)
_TITLE = deferred(r"(?is)<title[^>]{0,200}>\s*([^<]{0,400})")
_SPACE = deferred(r"\s+")


@dataclass(frozen=True, slots=True)
class ShapeLimits:
    """How much the book keeps (``unexplained:`` in the settings)."""

    max_shapes: int = 256
    max_per_route: int = 64
    sample_chars: int = 2048


@dataclass(frozen=True, slots=True)
class Shape:
    """What identifies an unexplained answer: equal shapes are the same kind of error."""

    route: str
    status: int
    media_type: str
    #: ``json``, ``html``, ``text`` or ``empty``
    kind: str
    #: JSON: ``path:type`` entries, sorted; HTML: its title; text: its first line; masked
    structure: tuple[str, ...]


@dataclass(slots=True)
class Seen:
    """One shape's record: how often, when, what explained it, and one masked sample."""

    shape: Shape
    rule: str
    count: int
    first_seen: float
    last_seen: float
    sample: str
    headers: dict[str, str] = field(default_factory=dict)
    method: str = ""
    path: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Seen:
        shape = data["shape"]
        return cls(
            shape=Shape(**{**shape, "structure": tuple(shape["structure"])}),
            **{k: v for k, v in data.items() if k != "shape"},
        )


def masked_line(text: str) -> str:
    """``text`` with its variable parts (quoted values, ids, numbers) masked, spaces folded."""
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return _SPACE.sub(" ", text).strip()[:MAX_LINE_CHARS]


def json_paths(value: Any, prefix: str = "", depth: int = 0) -> list[str]:
    """A JSON value's key paths with their value types (``error.message:string``); an array's
    first member stands for all (``errors[].field:string``)."""
    if isinstance(value, dict) and depth < MAX_DEPTH and value:
        paths: list[str] = []
        for key in sorted(value)[:MAX_PATHS]:
            paths += json_paths(value[key], f"{prefix}.{key}" if prefix else str(key), depth + 1)
        return paths
    if isinstance(value, list) and depth < MAX_DEPTH and value:
        return json_paths(value[0], f"{prefix}[]", depth)
    return [f"{prefix or '$'}:{_type_name(value)}"]


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def shape_of(
    route: str, status: int, media_type: str, json: Any, text: str, *, is_json: bool
) -> Shape:
    """The shape of one answer (``json`` is its parsed body when ``is_json``)."""
    media_type = media_type.split(";", 1)[0].strip().lower()
    if is_json:
        structure = tuple(sorted(json_paths(json))[:MAX_PATHS])
        return Shape(route, status, media_type, "json", structure)
    if not text.strip():
        return Shape(route, status, media_type, "empty", ())
    title = _TITLE.search(text[:65_536])
    if title is not None and "html" in media_type:
        return Shape(route, status, media_type, "html", (masked_line(title.group(1) or ""),))
    first = text.lstrip().split("\n", 1)[0]
    return Shape(route, status, media_type, "text", (masked_line(first[:400]),))


def kept_headers(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The headers a rule may read from (a wait, a budget), cut short; the caller masks them."""
    return {str(name): value[:200] for name, value in headers if _sampled(name.lower())}


def _sampled(name: str) -> bool:
    return name in _SAMPLE_NAMES or name.startswith(_SAMPLE_PREFIXES)


class ShapeBook:
    """The unexplained shapes of this process, least recently seen first, within its limits."""

    def __init__(self, limits: ShapeLimits | None = None) -> None:
        self.limits = limits or ShapeLimits()
        self._seen: OrderedDict[Shape, Seen] = OrderedDict()
        #: bumped on every change (a worker writes its file when it moved)
        self.version = 0

    def record(
        self,
        shape: Shape,
        *,
        rule: str,
        sample: str,
        headers: dict[str, str],
        method: str = "",
        path: str = "",
        now: float | None = None,
    ) -> Seen:
        """Count one answer into its shape; a new shape keeps ``sample`` (already masked)."""
        now = time.time() if now is None else now
        self.version += 1
        seen = self._seen.get(shape)
        if seen is not None:
            seen.count, seen.last_seen = seen.count + 1, now
            self._seen.move_to_end(shape)
            return seen
        self._make_room(shape.route)
        cut = sample[: self.limits.sample_chars]
        seen = Seen(shape, rule, 1, now, now, cut, headers, method, path[:200])
        self._seen[shape] = seen
        return seen

    def _make_room(self, route: str) -> None:
        on_route = [s for s in self._seen if s.route == route]
        if len(on_route) >= self.limits.max_per_route:
            del self._seen[on_route[0]]
        while len(self._seen) >= self.limits.max_shapes:
            self._seen.popitem(last=False)

    def entries(self) -> list[Seen]:
        """Every shape kept, most often seen first."""
        return sorted(self._seen.values(), key=lambda s: (-s.count, -s.last_seen))

    def dump(self) -> list[dict[str, Any]]:
        return [seen.as_dict() for seen in self._seen.values()]


def merge(books: Iterable[Iterable[Mapping[str, Any]]], limits: ShapeLimits) -> list[Seen]:
    """Several workers' dumps as one list: a shape seen by several is counted once with their
    sum, its first sample kept; cut to ``limits.max_shapes``, most often seen first."""
    merged: dict[Shape, Seen] = {}
    for book in books:
        for data in book:
            seen = Seen.of(data)
            known = merged.get(seen.shape)
            if known is None:
                merged[seen.shape] = seen
                continue
            known.count += seen.count
            known.first_seen = min(known.first_seen, seen.first_seen)
            known.last_seen = max(known.last_seen, seen.last_seen)
    ordered = sorted(merged.values(), key=lambda s: (-s.count, -s.last_seen))
    return ordered[: limits.max_shapes]
