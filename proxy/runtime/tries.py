"""The tries of one request under a retry policy: what ``Flow.tries`` holds.

Its own module so that the ``Flow`` can name it without importing the retrier
(``proxy/runtime/retries.py``), which takes a ``Flow``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from proxy.config.retries import Retries
from proxy.edge.kept_body import KeptBody
from proxy.edge.upstream import Timeouts


@dataclass(slots=True)
class Tries:
    """The tries of one request under a retry policy."""

    policy: Retries
    #: ``time.perf_counter()`` when the first try went
    began: float
    #: the tries' timeouts: the route's, the head's within ``per_try_timeout``
    timeouts: Timeouts
    #: no try waits past this (``read_timeout`` from the first try: the route's deadline)
    deadline: float
    #: the statuses the policy retries (``Retries.statuses``, made once per configuration)
    statuses: frozenset[int]
    #: the request body, kept for every try (``None``: the request has none)
    kept: KeptBody | None = None
    #: tries made so far, this one included
    count: int = 1

    def elapsed_ms(self) -> int:
        return round((time.perf_counter() - self.began) * 1000)

    def timeout(self) -> Timeouts:
        """The next try's timeouts: its head within ``per_try_timeout`` and the deadline."""
        left = self.deadline - time.perf_counter()
        return Timeouts(self.timeouts.connect, max(min(self.timeouts.read, left), 0.001))
