"""Whether a memory of responses seen before is worth asking (``match_memory.MatchMemory``,
``scrubber.Remembered``).

A memory pays for itself when responses repeat (an API answering an unchanged retry with the
same body) and costs a key, a look-up and an entry when they do not (a Spring 500 carries a new
``timestamp`` every time: bench ``/err500-fresh``, +80 k instructions an error with every memory
asked). So each memory keeps score: after ``PROBE`` look-ups with fewer than one hit in
``RATIO``, it is not asked for the next ``REST`` ones, then it is tried again.
"""

from __future__ import annotations

from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

#: look-ups scored before a memory may rest, and again after each rest
PROBE = 64
#: at least one hit in this many look-ups keeps a memory asked
RATIO = 5
#: look-ups a memory sits out when it missed too often
REST = 1024


class Probation:
    """A memory's score: ``worth`` before building a key, then ``hit`` or ``miss``."""

    __slots__ = ("hits", "misses", "resting")

    def __init__(self) -> None:
        self.hits = self.misses = self.resting = 0

    def worth(self) -> bool:
        """Whether to ask the memory this time (a resting one is not asked, nor told)."""
        if self.resting:
            self.resting -= 1
            return False
        return True

    def hit(self) -> None:
        self.hits += 1
        if self.hits + self.misses >= PROBE:
            self.hits = self.misses = 0

    def miss(self) -> None:
        self.misses += 1
        if self.hits + self.misses >= PROBE:
            if self.hits * RATIO < PROBE:
                self.resting = REST
            self.hits = self.misses = 0


class Bounded(Generic[K, V]):
    """A memory's entries, each with its size in characters: at most ``max_entries`` of them
    and ``max_chars`` in all, the oldest dropped first."""

    __slots__ = ("chars", "entries", "max_chars", "max_entries")

    def __init__(self, max_entries: int, max_chars: int) -> None:
        self.max_entries, self.max_chars = max_entries, max_chars
        self.entries: dict[K, tuple[V, int]] = {}
        self.chars = 0

    def put(self, key: K, value: V, size: int) -> None:
        entries = self.entries
        while entries and (len(entries) >= self.max_entries or self.chars + size > self.max_chars):
            self.chars -= entries.pop(next(iter(entries)))[1]
        entries[key] = (value, size)
        self.chars += size
