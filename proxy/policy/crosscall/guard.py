"""Fail open: a store that is slow or down costs a request at most ``state.timeout_ms``.

The request is then answered without the cross-call fields; the failure is counted
(``mend_state_errors_total``) and logged at most once per interval, and the next call simply
tries again, so mend recovers by itself when the store returns.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter
from structlog.typing import FilteringBoundLogger

T = TypeVar("T")
#: the ``operation`` label's values
OPERATIONS = ("record", "summary", "circuit")


class StateError(Exception):
    """The store could not answer (``redis_store`` translates its client's errors into this)."""


class Guard:
    def __init__(
        self,
        timeout_ms: int,
        log_interval_s: float,
        registry: CollectorRegistry,
        logger: FilteringBoundLogger,
    ) -> None:
        self.timeout_s = timeout_ms / 1000
        self.log_interval_s = log_interval_s
        self.log = logger
        self.errors = Counter(
            "mend_state_errors",
            "Calls to the shared state store that failed or timed out (answered without it).",
            ["operation"],
            registry=registry,
        )
        for operation in OPERATIONS:  # every series exists from the start, at 0
            self.errors.labels(operation)
        self._logged_at = -float("inf")
        self._suppressed = 0
        #: False for a store in this process, which never waits: no timer is armed for it
        self.bounded = True

    async def run(self, operation: str, work: Awaitable[T]) -> T | None:
        """``work``'s result, or ``None`` if it failed or took longer than the timeout."""
        if not self.bounded:
            return await work
        try:
            async with asyncio.timeout(self.timeout_s):
                return await work
        except (TimeoutError, StateError) as exc:
            self._failed(operation, exc)
            return None

    def _failed(self, operation: str, exc: Exception) -> None:
        self.errors.labels(operation).inc()
        now = time.monotonic()
        if now - self._logged_at < self.log_interval_s:
            self._suppressed += 1
            return
        self.log.warning(
            "state_store_error",
            operation=operation,
            error="timeout" if isinstance(exc, TimeoutError) else str(exc)[:200],
            suppressed=self._suppressed,
        )
        self._logged_at, self._suppressed = now, 0
