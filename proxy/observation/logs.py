"""Structured logs: one JSON line per request (docs/contract.md §5), built as a structlog chain.

The logger is made per app and passed in, so tests and embedders choose where lines go; nothing
configures structlog globally. What aiohttp and asyncio log through the stdlib ``logging``
module goes down the same chain (``stdlib_logs.py``), so every line on stdout is one JSON
object. An ``info`` line with nothing bound and no exception (every request's) skips the chain
and is rendered by ``json_lines``' own ``info`` to the same bytes (issue 29: 59 k instructions
through structlog).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import sys
import threading
import time
import traceback
from collections import deque
from pathlib import PurePath
from types import FrameType, TracebackType
from typing import Any, Final, TextIO

import orjson
import structlog
from structlog.typing import EventDict, WrappedLogger

from proxy.policy.shorten import shortened


def _orjson_dumps(value: Any, **_: Any) -> str:
    return orjson.dumps(value, default=str).decode()


def _drop_none(_: WrappedLogger, __: str, event: EventDict) -> EventDict:
    return {k: v for k, v in event.items() if v is not None}


# ---------------------------------------------------------------------------------------------
# Exceptions on one line
# ---------------------------------------------------------------------------------------------

_WS = re.compile(r"\s+")
#: Frames kept of a traceback, the innermost ones: where it failed, not how the loop got there.
_FRAMES = 8
#: Causes (``raise ... from``) and contexts followed after the exception itself.
_CHAIN = 3
_EXCEPTION_MESSAGE_MAX = 500


def one_line(text: str, limit: int) -> str:
    """``text`` with every run of whitespace (newlines too) one space, at most ``limit`` long."""
    flat = _WS.sub(" ", text[: limit * 4]).strip()
    return shortened(flat, limit)


def safe_str(value: object) -> str:
    try:
        return str(value)
    except Exception:  # a hostile __str__ must not lose the line
        return f"<unprintable {type(value).__name__}>"


def _head(exc: BaseException) -> str:
    kind = type(exc)
    name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )
    message = one_line(safe_str(exc), _EXCEPTION_MESSAGE_MAX)
    return f"{name}: {message}" if message else name


def _frame(frame: FrameType, lineno: int) -> str:
    where = "/".join(PurePath(frame.f_code.co_filename).parts[-2:])
    return f"{where}:{lineno} {frame.f_code.co_name}"


def _frames(tb: TracebackType | None) -> str:
    """The innermost frames, outermost first, without reading source files."""
    tail: deque[tuple[FrameType, int]] = deque(maxlen=_FRAMES)
    total = 0
    for entry in traceback.walk_tb(tb):  # iterative: a RecursionError's 1000 frames are fine
        tail.append(entry)
        total += 1
    frames = [_frame(frame, lineno) for frame, lineno in tail]
    return " > ".join(["…", *frames] if total > len(tail) else frames)


def _cause(exc: BaseException) -> BaseException | None:
    if exc.__cause__ is not None:
        return exc.__cause__
    return None if exc.__suppress_context__ else exc.__context__


def exception_line(exc: BaseException) -> str:
    """``Type: message | at a/b.py:1 f > c/d.py:2 g | from Cause: message``, on one line.

    Bounded whatever the exception: its message is cut, only the innermost frames are named and
    a few causes followed.
    """
    parts = [_head(exc)]
    if exc.__traceback__ is not None:
        parts.append(f"at {_frames(exc.__traceback__)}")
    seen = {id(exc)}
    cause = _cause(exc)
    while cause is not None and id(cause) not in seen and len(seen) <= _CHAIN:
        seen.add(id(cause))
        parts.append(f"from {_head(cause)}")
        cause = _cause(cause)
    return " | ".join(parts)


def as_exception(exc_info: Any) -> BaseException | None:
    if isinstance(exc_info, BaseException):
        return exc_info
    if isinstance(exc_info, tuple) and len(exc_info) == 3:
        return exc_info[1] if isinstance(exc_info[1], BaseException) else None
    return sys.exc_info()[1] if exc_info is True else None


def _exception_field(_: WrappedLogger, __: str, event: EventDict) -> EventDict:
    """``log.exception(...)``'s ``exc_info`` as an ``exception`` field on the same line."""
    exc_info = event.pop("exc_info", None)
    if exc_info:
        exc = as_exception(exc_info)
        if exc is not None:
            event["exception"] = exception_line(exc)
    return event


class UtcTimestamp:
    """``timestamp``: ISO 8601 in UTC with microseconds, as ``2026-11-22T07:57:56.123456Z``.

    structlog's ``TimeStamper`` builds a ``datetime`` for every line; on the request path that
    was a fifth of the log line's cost, so the part up to the second is formatted once a second.
    """

    def __init__(self) -> None:
        #: (the second, its text): one tuple, so a thread never pairs one's second with another's
        self._second: tuple[int, str] = (-1, "")

    def now(self) -> str:
        """The current time, stamped."""
        now = time.time()
        second = int(now)
        cached, prefix = self._second
        if second != cached:
            prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = (second, prefix)
        return f"{prefix}.{int((now - second) * 1_000_000):06d}Z"

    def __call__(self, _: WrappedLogger, __: str, event: EventDict) -> EventDict:
        event["timestamp"] = self.now()
        return event


#: The one stamper of every logger: its cache is per second, not per logger.
_STAMP = UtcTimestamp()


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


#: ``log_level`` (``--log-level``): the least severe line written, each name's stdlib level.
LEVELS: Final = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


@functools.cache
def json_lines(level: int = logging.INFO) -> Any:
    """structlog's bound logger class dropping lines below ``level``, with a faster ``info``.

    ``info(event, **fields)`` with no context bound, no ``%`` arguments and no ``exc_info`` (every
    request's line) makes the line the chain would (``fields``, ``event``, ``level``,
    ``timestamp``, in that order, ``None`` left out, serialised by orjson with ``default=str``)
    without its five processor calls and keyword copies; anything else goes down the chain.
    """
    filtering: Any = structlog.make_filtering_bound_logger(level)
    if level > logging.INFO:  # info is structlog's no-op: nothing to speed up
        return filtering
    chained = filtering.info

    def info(self: Any, event: str, *args: Any, **kw: Any) -> Any:
        if args or self._context or "exc_info" in kw:
            return chained(self, event, *args, **kw)
        kw["event"] = event
        kw["level"] = "info"
        kw["timestamp"] = _STAMP.now()
        line = orjson.dumps({k: v for k, v in kw.items() if v is not None}, default=str)
        return self._logger.info(line.decode())

    return type("JsonLines", (filtering,), {"info": info})


def make_logger(
    stream: TextIO | LineWriter | None = None, level: str = "info"
) -> structlog.typing.FilteringBoundLogger:
    """A logger writing JSON lines at ``level`` (a ``LEVELS`` name) and above to ``stream``
    (stdout), each flushed at once unless ``stream`` is a ``LineWriter`` that batches them."""
    writer = stream if isinstance(stream, LineWriter) else LineWriter(stream or sys.stdout)
    # bind() once: the lazy proxy wrap_logger returns would rebuild the logger on every call
    return structlog.wrap_logger(  # type: ignore[no-any-return]
        writer,
        processors=[
            structlog.processors.add_log_level,
            _exception_field,
            _STAMP,
            _drop_none,
            structlog.processors.JSONRenderer(serializer=_orjson_dumps),
        ],
        wrapper_class=json_lines(LEVELS[level]),
    ).bind()
