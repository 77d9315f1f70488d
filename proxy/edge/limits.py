"""The process's file-descriptor budget: raised at start, shared out, watched.

Every agent connection can hold an upstream connection too, so a process that may open N files
serves at most about N/2 agents. Past that, accept(2) fails with EMFILE: libuv (uvloop) then
accepts and resets each new connection silently, asyncio logs a traceback per attempt. mend
instead keeps its connection cap under the budget, so the agent past it gets a 503 envelope, and
says once per interval when the process runs close to its limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource

from structlog.typing import FilteringBoundLogger

#: Files kept for everything that is not a connection: listeners, logs, rule files, the loop.
RESERVED_FILES = 32


def raise_nofile() -> int:
    """Raise the soft file limit to the hard one (as Go's runtime and nginx's
    ``worker_rlimit_nofile`` do) and return the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def connection_budget(max_connections: int, nofile: int) -> int:
    """The agent connections this process can hold with an upstream connection each."""
    if nofile == resource.RLIM_INFINITY:
        return max_connections
    return max(1, min(max_connections, (nofile - RESERVED_FILES) // 2))


def open_files() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # no procfs: nothing to watch
        return 0


class FdWatch:
    """Every ``interval_s``, one warning while open files are above ``threshold`` of the limit,
    with the count of open files (never one line per refused connection)."""

    def __init__(
        self,
        logger: FilteringBoundLogger,
        nofile: int,
        *,
        interval_s: float = 10.0,
        threshold: float = 0.9,
    ) -> None:
        self.log = logger
        self.nofile = nofile
        self.interval_s = interval_s
        self.threshold = threshold
        self.task: asyncio.Task[None] | None = None

    def check(self) -> bool:
        used = open_files()
        near = self.nofile != resource.RLIM_INFINITY and used >= self.threshold * self.nofile
        if near:
            self.log.warning("file_descriptors_near_limit", open_files=used, limit=self.nofile)
        return near

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self.check()

    def start(self) -> None:
        self.task = asyncio.ensure_future(self.run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
