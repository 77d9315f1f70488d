"""Structured logs: one JSON line per request (CONTRACT §5), built as a structlog chain.

The logger is made per app and passed in, so tests and embedders choose where lines go; nothing
configures structlog globally.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from typing import Any, TextIO

import orjson
import structlog
from structlog.typing import EventDict, WrappedLogger


def _orjson_dumps(value: Any, **_: Any) -> str:
    return orjson.dumps(value, default=str).decode()


def _drop_none(_: WrappedLogger, __: str, event: EventDict) -> EventDict:
    return {k: v for k, v in event.items() if v is not None}


class UtcTimestamp:
    """``timestamp``: ISO 8601 in UTC with microseconds, as ``2026-11-22T07:57:56.123456Z``.

    structlog's ``TimeStamper`` builds a ``datetime`` for every line; on the request path that
    was a fifth of the log line's cost, so the part up to the second is formatted once a second.
    """

    def __init__(self) -> None:
        self._second = -1
        self._prefix = ""

    def __call__(self, _: WrappedLogger, __: str, event: EventDict) -> EventDict:
        now = time.time()
        second = int(now)
        if second != self._second:
            self._prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = second
        event["timestamp"] = f"{self._prefix}.{int((now - second) * 1_000_000):06d}Z"
        return event


class LineWriter:
    """Writes rendered lines to ``stream``; info lines in batches, problems at once.

    With ``flush_interval`` 0 every line is written and flushed as it comes (structlog's
    ``WriteLogger``). Above 0, info lines are kept and written together at most that many seconds
    later (or when ``max_lines`` are waiting): one ``write(2)`` per request line put a system call
    on every request's path, before its response (stdout is unbuffered in containers, where
    ``PYTHONUNBUFFERED`` is the norm). nginx's ``access_log ... flush=`` and Envoy's file flush
    interval do the same. A warning or error writes everything waiting and itself at once, and so
    does a line logged off the event loop (a reload in a thread), where no timer can be set.
    """

    def __init__(self, stream: TextIO, flush_interval: float = 0.0, max_lines: int = 512) -> None:
        self._stream = stream
        self._interval = flush_interval
        self._max_lines = max_lines
        self._lines: list[str] = []
        # reloads log from worker threads: appending and taking the batch must not interleave
        self._lock = threading.Lock()
        self._pending: asyncio.TimerHandle | None = None

    def msg(self, message: str) -> None:
        if self._interval <= 0:
            self.urgent(message)
            return
        with self._lock:
            self._lines.append(message)
            waiting = len(self._lines)
        if self._pending is not None and waiting < self._max_lines:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        if waiting >= self._max_lines:
            self.flush()
        else:
            self._pending = loop.call_later(self._interval, self.flush)

    def urgent(self, message: str) -> None:
        with self._lock:
            self._lines.append(message)
        self.flush()

    def flush(self) -> None:
        """Write every waiting line now."""
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        with self._lock:
            lines, self._lines = self._lines, []
        if lines:
            self._stream.write("\n".join(lines) + "\n")
            self._stream.flush()

    debug = info = msg
    warning = error = critical = exception = fatal = urgent


def make_logger(stream: TextIO | LineWriter | None = None) -> structlog.typing.FilteringBoundLogger:
    """A logger writing JSON lines to ``stream`` (stdout), each flushed at once unless ``stream``
    is a ``LineWriter`` that batches them."""
    writer = stream if isinstance(stream, LineWriter) else LineWriter(stream or sys.stdout)
    # bind() once: the lazy proxy wrap_logger returns would rebuild the logger on every call
    return structlog.wrap_logger(  # type: ignore[no-any-return]
        writer,
        processors=[
            structlog.processors.add_log_level,
            UtcTimestamp(),
            _drop_none,
            structlog.processors.JSONRenderer(serializer=_orjson_dumps),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(0),
    ).bind()
