"""The rendering an agent's ``Accept`` asks for (RFC 9110 §12.5.1), with a small cache."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from proxy.config.choices import Rendering
from proxy.policy.render.accept import media_ranges

#: (type, subtype, rendering) in the order used as the last tie-break.
_OFFERS: tuple[tuple[str, str, Rendering], ...] = (
    ("application", "json", Rendering.JSON),
    ("application", "problem+json", Rendering.PROBLEM),
    ("text", "plain", Rendering.TEXT),
    ("text", "markdown", Rendering.MARKDOWN),
    ("application", "xml", Rendering.XML),
    ("text", "xml", Rendering.XML),
    ("application", "problem+xml", Rendering.XML),
)
_OFFER_ORDER: Mapping[Rendering, int] = {r: i for i, r in enumerate(Rendering)}


class _Score(NamedTuple):
    """How acceptable one rendering is: the best of its media types against the header."""

    q: float
    specificity: int  # 2 = type/subtype, 1 = type/*, 0 = */*
    position: int  # index in the header of the range that matched

    def key(self) -> tuple[float, int, int]:
        return (self.q, self.specificity, -self.position)


_Prefs = tuple[tuple[Rendering, _Score], ...]


def _preferences(accept: str) -> _Prefs:
    """Each rendering the header accepts at all, with its score (independent of the default)."""
    ranges = media_ranges(accept)
    best: dict[Rendering, _Score] = {}
    for kind, subtype, rendering in _OFFERS:
        match: _Score | None = None
        for position, media in enumerate(ranges):
            specificity = media.specificity(kind, subtype)
            if specificity is None:
                continue
            # The most specific range decides (RFC 9110 §12.5.1); among equally specific
            # duplicates the most generous one wins.
            if (
                match is None
                or specificity > match.specificity
                or (specificity == match.specificity and media.q > match.q)
            ):
                match = _Score(media.q, specificity, position)
        if match is None or match.q <= 0.0:
            continue
        current = best.get(rendering)
        if current is None or match.key() > current.key():
            best[rendering] = match
    return tuple(best.items())


def _pick(prefs: _Prefs, default: Rendering) -> Rendering:
    if not prefs:
        return default
    top_q = max(score.q for _, score in prefs)
    tied = [(r, s) for r, s in prefs if s.q == top_q]
    top_specificity = max(s.specificity for _, s in tied)
    tied = [(r, s) for r, s in tied if s.specificity == top_specificity]
    if any(r is default for r, _ in tied):
        return default
    return min(tied, key=lambda item: (item[1].position, _OFFER_ORDER[item[0]]))[0]


def negotiate(accept: str | None, default: Rendering) -> Rendering:
    """The rendering ``Accept`` asks for; ``default`` when absent, ``*/*`` or unsatisfiable.

    Never raises: a malformed range is skipped, and a header with nothing we offer gets the
    default rather than a 406, because an agent is better served by some envelope than none.
    """
    if not accept or not accept.strip():
        return default
    return _pick(_preferences(accept), default)


class Negotiator:
    """``negotiate`` with a bounded least-recently-used cache of parsed headers.

    Built once per process and passed to the handler; agents repeat the same ``Accept`` on every
    call, so parsing once per distinct header is enough.
    """

    #: Longer headers are parsed but not kept, so the cache's memory stays bounded.
    MAX_CACHED_LENGTH = 1024

    def __init__(self, max_entries: int = 256) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._max_entries = max_entries
        self._cache: dict[str, _Prefs] = {}

    def __len__(self) -> int:
        return len(self._cache)

    def __contains__(self, accept: object) -> bool:
        return accept in self._cache

    def choose(self, accept: str | None, default: Rendering) -> Rendering:
        if not accept or not accept.strip():
            return default
        prefs = self._cache.pop(accept, None)
        if prefs is None:
            prefs = _preferences(accept)
            if len(accept) > self.MAX_CACHED_LENGTH:
                return _pick(prefs, default)
            if len(self._cache) >= self._max_entries:
                del self._cache[next(iter(self._cache))]
        # Re-inserting moves the entry to the end: dict order is the recency order.
        self._cache[accept] = prefs
        return _pick(prefs, default)
