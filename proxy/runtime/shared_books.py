"""The operator's books shared by replicas through the state store (``state: redis://``;
issue 40).

Every few seconds, a replica whose books changed writes them (masked, bounded: the same dump a
worker writes for its supervisor) to the store under its own name, kept a minute, and reads every
other replica's; the admin page merges them with its own. A replica that stops is gone from the
page within the minute. The store failing costs the page the others' books, never a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from typing import Any

import orjson
from structlog.typing import FilteringBoundLogger

from proxy.policy.crosscall.guard import StateError
from proxy.policy.crosscall.store import StateStore
from proxy.runtime.books import Books

#: seconds between two exchanges with the store, and the longest one may take
EXCHANGE_S = 5.0
TIMEOUT_S = 2.0
#: how long a replica's books outlive its last write
TTL_MS = 60_000


def replica_name() -> str:
    """This process among the replicas: its host and pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


class SharedBooks:
    """Writes this replica's books to the store and keeps the others' (``others``)."""

    def __init__(
        self, store: StateStore, books: Books, logger: FilteringBoundLogger, replica: str
    ) -> None:
        self.store, self.books, self.log, self.replica = store, books, logger, replica
        #: the other replicas' books, by replica, as last read
        self.others: dict[str, dict[str, Any]] = {}
        self._written = -1
        self._failing = False
        self._task: asyncio.Task[None] | None = None

    async def exchange(self) -> None:
        """One turn: write ours if they changed, read everyone's."""
        try:
            if self.books.version != self._written:
                written = self.books.version
                dump = orjson.dumps(self.books.own())
                await asyncio.wait_for(self.store.put_books(self.replica, dump, TTL_MS), TIMEOUT_S)
                self._written = written
            found = await asyncio.wait_for(self.store.books(), TIMEOUT_S)
        except (StateError, TimeoutError) as exc:
            if not self._failing:
                self.log.warning("shared_books_unavailable", error=str(exc) or "timed out")
            self._failing = True
            return
        self._failing = False
        self.others = {
            name: books
            for name, raw in found.items()
            if name != self.replica and isinstance(books := _loads(raw), dict)
        }

    async def _run(self) -> None:
        while True:
            await self.exchange()
            await asyncio.sleep(EXCHANGE_S)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def _loads(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
