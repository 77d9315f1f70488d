"""The last errors agents met, each with what the upstream answered beside what the agent got
(issue 40): the admin page's "recent failures".

A bounded ring: ``RecentLimits.size`` failures at most, each side's body cut to
``RecentLimits.body_chars``. What goes in is masked by the caller as the log line masks bodies (the
upstream's side) or is already the envelope mend wrote (the agent's side, redacted by the build).
With ``--workers``, each worker's ring is written to its snapshot file and the supervisor merges
them by time (``merge``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class RecentLimits:
    """How many failures the ring keeps, and how much of each body."""

    size: int = 50
    body_chars: int = 4096


@dataclass(frozen=True, slots=True)
class Side:
    """One side of a failure: a status, its media type, chosen headers and the body's start."""

    #: ``None``: the upstream gave no answer (refused, reset, timed out)
    status: int | None
    content_type: str
    headers: dict[str, str]
    body: str

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Side:
        return cls(data["status"], data["content_type"], dict(data["headers"]), data["body"])


@dataclass(frozen=True, slots=True)
class Failure:
    """One error an agent met: which request, which rule, and the two sides."""

    at: float
    request_id: str
    route: str
    method: str
    path: str
    code: str
    rule: str
    upstream: Side
    agent: Side

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Failure:
        fields = {k: data[k] for k in ("at", "request_id", "route", "method", "path", "code")}
        return cls(
            **fields,
            rule=data["rule"],
            upstream=Side.of(data["upstream"]),
            agent=Side.of(data["agent"]),
        )


class RecentFailures:
    """The ring: the newest ``limits.size`` failures, oldest out."""

    def __init__(self, limits: RecentLimits | None = None) -> None:
        self.limits = limits or RecentLimits()
        self._ring: deque[Failure] = deque(maxlen=self.limits.size)

    def add(self, failure: Failure) -> None:
        self._ring.append(failure)

    def entries(self) -> list[Failure]:
        """Newest first."""
        return list(reversed(self._ring))

    def dump(self) -> list[dict[str, Any]]:
        return [f.as_dict() for f in self._ring]


def merge(rings: Iterable[Iterable[Mapping[str, Any]]], limits: RecentLimits) -> list[Failure]:
    """Several workers' rings as one, newest first, ``limits.size`` at most; an entry that does
    not read (a file from another version) is skipped."""
    found: list[Failure] = []
    for ring in rings:
        for data in ring:
            try:
                found.append(Failure.of(data))
            except (KeyError, TypeError):
                continue
    found.sort(key=lambda f: f.at, reverse=True)
    return found[: limits.size]
