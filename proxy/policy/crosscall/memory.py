"""The state store of a single process: bounded, TTL'd, flat under any number of agents.

Sessions live in one LRU table; every remembered failure and every counted request is an entry,
and past ``max_entries`` the least recently failing sessions are dropped whole. An entry older
than the window is dropped when its session is next touched, and a session quiet for a window is
dropped when it reaches the LRU's end or is next looked at.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from proxy.policy.crosscall.store import (
    MAX_PATH_CHARS,
    MAX_REPEATS_PER_SESSION,
    MAX_REQUESTS_PER_CATEGORY,
    Failure,
    Repeat,
    Seen,
    Summary,
)


@dataclass(slots=True)
class _Entry:
    count: int
    first_ms: int
    due_ms: int | None
    method: str
    path: str
    code: str


@dataclass(slots=True)
class _Session:
    last_ms: int = 0
    repeats: dict[str, _Entry] = field(default_factory=dict)
    #: category -> request digest -> last failure (epoch ms)
    requests: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.repeats) + sum(len(r) for r in self.requests.values())

    def expire(self, oldest_ms: int) -> int:
        """Drop what is older than ``oldest_ms``; how many entries went."""
        gone = 0
        for key in [k for k, e in self.repeats.items() if e.first_ms < oldest_ms]:
            del self.repeats[key]
            gone += 1
        for category, seen in list(self.requests.items()):
            for key in [k for k, at in seen.items() if at < oldest_ms]:
                del seen[key]
                gone += 1
            if not seen:
                del self.requests[category]
        return gone


#: operations whose circuit counts are kept (one small list each)
MAX_CIRCUITS = 10_000


class MemoryStore:
    def __init__(self, max_entries: int = 100_000) -> None:
        self.max_entries = max_entries
        self.entries = 0
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        #: operation -> [consecutive failures, open until (epoch ms), probe taken until (epoch
        #: ms)]; at most ``MAX_CIRCUITS``, the oldest dropped first
        self._circuits: dict[str, list[int]] = {}

    # --- repeats and patterns ----------------------------------------------------------------

    async def record(self, failure: Failure) -> Seen:
        session = self._session(failure.session, failure.now_ms - failure.window_ms)
        session.last_ms = failure.now_ms
        entry = session.repeats.get(failure.fingerprint)
        previous_due = entry.due_ms if entry is not None else None
        if entry is None:
            if len(session.repeats) >= MAX_REPEATS_PER_SESSION:
                self.entries -= len(session.repeats)
                session.repeats.clear()
            entry = session.repeats[failure.fingerprint] = _Entry(
                0,
                failure.now_ms,
                None,
                failure.method,
                failure.path[:MAX_PATH_CHARS],
                failure.code,
            )
            self.entries += 1
        entry.count += 1
        entry.due_ms = failure.retry_due_ms
        seen = session.requests.setdefault(failure.category, {})
        if failure.request in seen:
            seen[failure.request] = failure.now_ms
        elif len(seen) < MAX_REQUESTS_PER_CATEGORY:
            seen[failure.request] = failure.now_ms
            self.entries += 1
        self._evict(keep=failure.session)
        categories = {c: len(r) for c, r in session.requests.items()}
        return Seen(entry.count, entry.first_ms, previous_due, categories)

    async def summary(self, session: str, now_ms: int, window_ms: int) -> Summary:
        found = self._sessions.get(session)
        if found is None:
            return Summary({}, [])
        self.entries -= found.expire(now_ms - window_ms)
        repeats = [
            Repeat(e.method, e.path, e.code, e.count, e.first_ms) for e in found.repeats.values()
        ]
        return Summary({c: len(r) for c, r in found.requests.items()}, repeats)

    def _session(self, key: str, oldest_ms: int) -> _Session:
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = _Session()
        else:
            self._sessions.move_to_end(key)
            self.entries -= session.expire(oldest_ms)
        return session

    def _evict(self, keep: str) -> None:
        while self.entries > self.max_entries and len(self._sessions) > 1:
            key, oldest = next(iter(self._sessions.items()))
            if key == keep:  # never reached: ``keep`` was just moved to the end
                break
            del self._sessions[key]
            self.entries -= oldest.size

    # --- circuits ----------------------------------------------------------------------------

    async def circuit_failure(self, route: str, threshold: int, open_ms: int, now_ms: int) -> int:
        state = self._circuits.get(route)
        if state is None:
            while len(self._circuits) >= MAX_CIRCUITS:
                del self._circuits[next(iter(self._circuits))]
            state = self._circuits[route] = [0, 0, 0]
        if state[1] and state[1] <= now_ms:  # the half-open probe failed: open again
            state[0], state[1], state[2] = 0, now_ms + open_ms, 0
            return state[1]
        if state[1]:  # already open: a request sent before it opened
            return state[1]
        state[0] += 1
        if state[0] >= threshold:
            state[0], state[1], state[2] = 0, now_ms + open_ms, 0
        return state[1]

    async def circuit_success(self, route: str) -> bool:
        self._circuits.pop(route, None)
        return True

    async def circuit_state(self, route: str) -> int:
        state = self._circuits.get(route)
        return state[1] if state else 0

    async def circuit_probe(self, route: str, ttl_ms: int, now_ms: int) -> bool:
        state = self._circuits.get(route)
        if state is None:
            return True
        if state[2] > now_ms:
            return False
        state[2] = now_ms + ttl_ms
        return True

    async def put_books(self, replica: str, books: bytes, ttl_ms: int) -> None:
        """One process has no other replica to share its books with: nothing kept."""

    async def books(self) -> dict[str, bytes]:
        return {}

    async def close(self) -> None:
        self._sessions.clear()
