"""What the cross-call view remembers, behind one protocol: in this process or in Redis.

Every method is one round trip at most (``redis_store.py`` runs each as one Lua script), and
the proxy calls them only for failures, or for a route whose circuit has seen failures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

#: remembered identical failures per session; past it the session's table starts afresh
MAX_REPEATS_PER_SESSION = 256
#: distinct failing requests counted per category and session (a pattern needs only a few)
MAX_REQUESTS_PER_CATEGORY = 64
#: characters of a path kept for the session summary
MAX_PATH_CHARS = 200


@dataclass(frozen=True, slots=True)
class Failure:
    """One failure, as the store needs it: digests and small numbers, no request content."""

    session: str
    #: digest of (method, route, path, body hash, code): the same request failing the same way
    fingerprint: str
    #: digest of (method, route, path, body hash): a *different* request, for patterns
    request: str
    category: str
    #: for the session summary: what the agent sent (path cut to ``MAX_PATH_CHARS``)
    method: str
    path: str
    code: str
    now_ms: int
    window_ms: int
    #: when an unchanged retry is due (epoch ms); ``None``: not retryable
    retry_due_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Seen:
    """What the store knew, this failure counted in."""

    #: identical failures within the window, this one included
    count: int
    first_ms: int
    #: when the previous identical failure said a retry was due (``None``: none said so)
    previous_due_ms: int | None
    #: distinct failing requests per category in the session
    categories: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Repeat:
    method: str
    path: str
    code: str
    count: int
    first_ms: int


@dataclass(frozen=True, slots=True)
class Summary:
    """One session's own view (``GET /_mend/session``)."""

    categories: dict[str, int]
    repeats: list[Repeat]


#: replicas whose operator books one read returns
MAX_REPLICA_BOOKS = 64


class StateStore(Protocol):
    async def record(self, failure: Failure) -> Seen:
        """Count one failure into its session; what is known of it now."""

    async def summary(self, session: str, now_ms: int, window_ms: int) -> Summary:
        """The session's failures within the window (at most ``MAX_REPEATS_PER_SESSION``)."""

    async def circuit_failure(self, route: str, threshold: int, open_ms: int, now_ms: int) -> int:
        """One more consecutive upstream failure; the time the circuit is open until (epoch
        ms), 0 while closed. Reaching ``threshold`` opens it and starts a new count; a failure
        once the open time is over (the half-open probe's) opens it again at once."""

    async def circuit_success(self, route: str) -> bool:
        """The upstream answered: the count starts again, an open circuit closes (True)."""

    async def circuit_state(self, route: str) -> int:
        """The time the operation's circuit is open until (epoch ms; 0: closed)."""

    async def circuit_probe(self, route: str, ttl_ms: int, now_ms: int) -> bool:
        """Whether this caller may send the one probe of a half-open circuit."""

    async def put_books(self, replica: str, books: bytes, ttl_ms: int) -> None:
        """A replica's operator books (``proxy/runtime/shared_books.py``), kept ``ttl_ms``."""

    async def books(self) -> dict[str, bytes]:
        """Every replica's books, by replica (at most ``MAX_REPLICA_BOOKS``)."""

    async def close(self) -> None: ...
