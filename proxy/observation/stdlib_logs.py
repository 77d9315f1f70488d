"""stdlib ``logging`` (aiohttp's, asyncio's, any library's) as mend's JSON lines, rate limited.

``route_stdlib_logging`` puts one ``StdlibHandler`` on the root logger and on the ``aiohttp`` and
``asyncio`` loggers; each record goes down the same structlog chain as mend's own lines
(``logs.py``), and an identical record again within ``REPEAT_INTERVAL_S`` is counted, not
written (``RepeatCounter``), so a flood of one warning is one line and a count.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from structlog.typing import FilteringBoundLogger

from proxy.observation.logs import as_exception, exception_line, one_line, safe_str

#: An identical record again within this many seconds is counted, not written.
REPEAT_INTERVAL_S: Final = 10.0
#: Distinct records whose repeats are being counted; beyond this the oldest is settled early.
_REPEAT_KEYS = 256
_EVENT_MAX = 2000
_KEY_PART_MAX = 200
#: The stdlib loggers whose records go only to mend's handler, not also to the root's others.
_ROUTED = ("aiohttp", "asyncio")
_METHODS = (
    (logging.CRITICAL, "critical"),
    (logging.ERROR, "error"),
    (logging.WARNING, "warning"),
    (logging.INFO, "info"),
)

#: (logger name, first line of the message before its arguments are filled in)
RepeatKey = tuple[str, str]


def _method(levelno: int) -> str:
    return next((name for level, name in _METHODS if levelno >= level), "debug")


def repeat_key(record: logging.LogRecord) -> RepeatKey:
    """What makes two records "identical": the logger and the message template's first line.

    The template, not the formatted message: "Error handling request from %s" is one record
    however many peers there are, and asyncio's "Task exception was never retrieved" one
    however many tasks, so no sender can get around the limit by varying what it sends.
    """
    template = safe_str(record.msg)[: _KEY_PART_MAX * 4].split("\n", 1)[0]
    return record.name[:_KEY_PART_MAX], template[:_KEY_PART_MAX]


@dataclass(slots=True)
class _Window:
    start: float
    levelno: int
    suppressed: int = 0


@dataclass(frozen=True, slots=True)
class Repeated:
    """Records counted but not written since the last line for them."""

    key: RepeatKey
    levelno: int
    count: int


class RepeatCounter:
    """Per key, one record per ``interval`` is written; the rest are counted.

    Windows are kept in the order they opened, so the expired ones are always at the front:
    settling them costs nothing per record. At most ``max_keys`` are kept.
    """

    def __init__(self, interval: float, max_keys: int = _REPEAT_KEYS) -> None:
        self._interval = interval
        self._max_keys = max_keys
        self._windows: OrderedDict[RepeatKey, _Window] = OrderedDict()

    def admit(self, key: RepeatKey, now: float, levelno: int = logging.ERROR) -> int | None:
        """``None``: counted, not to be written. Else how many were counted before this one.

        Counting is a lookup and an addition: a storm of thousands a second costs no formatting.
        """
        window = self._windows.get(key)
        if window is not None and now - window.start < self._interval:
            window.suppressed += 1
            return None
        self._windows.pop(key, None)
        self._windows[key] = _Window(now, levelno)
        return window.suppressed if window is not None else 0

    def settle(self, now: float, *, everything: bool = False) -> list[Repeated]:
        """Close the windows that expired (or all), returning those that counted something."""
        closed: list[Repeated] = []
        while self._windows:
            key, window = next(iter(self._windows.items()))
            expired = now - window.start >= self._interval
            if not (everything or expired or len(self._windows) > self._max_keys):
                break
            del self._windows[key]
            if window.suppressed:
                closed.append(Repeated(key, window.levelno, window.suppressed))
        return closed


class StdlibHandler(logging.Handler):
    """A stdlib ``logging`` handler writing each record as one of mend's JSON lines.

    ``event`` is the message and ``logger`` the record's logger; an exception is one
    ``exception`` field (``exception_line``). An identical record (``repeat_key``) within
    ``interval`` seconds is only counted: the next line for it carries ``repeated``. A count
    nothing followed is written on its own line (the message template as ``event``) once its
    interval is over and another record arrives, or by ``flush``, which ``logging.shutdown``
    calls at exit.
    """

    def __init__(
        self,
        logger: FilteringBoundLogger,
        *,
        interval: float = REPEAT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._log = logger
        self._clock = clock
        self._repeats = RepeatCounter(interval)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            now = self._clock()
            repeated = self._repeats.admit(repeat_key(record), now, record.levelno)
            for closed in self._repeats.settle(now):
                self._write_repeated(closed)
            if repeated is not None:
                self._write(record, repeated)
        except Exception:
            self.handleError(record)

    def flush(self) -> None:
        """Write the counts of every record still being counted."""
        self.acquire()
        try:
            for closed in self._repeats.settle(self._clock(), everything=True):
                self._write_repeated(closed)
        finally:
            self.release()

    def _write(self, record: logging.LogRecord, repeated: int) -> None:
        event = one_line(_message(record), _EVENT_MAX)
        fields: dict[str, Any] = {"logger": record.name}
        if record.exc_info and (exc := as_exception(record.exc_info)) is not None:
            fields["exception"] = exception_line(exc)
        if record.stack_info:
            fields["stack"] = one_line(record.stack_info, _EVENT_MAX)
        if repeated:
            fields["repeated"] = repeated
        getattr(self._log, _method(record.levelno))(event, **fields)

    def _write_repeated(self, closed: Repeated) -> None:
        logger, template = closed.key
        getattr(self._log, _method(closed.levelno))(
            one_line(template, _EVENT_MAX), logger=logger, repeated=closed.count
        )


def _message(record: logging.LogRecord) -> str:
    try:
        return record.getMessage()
    except Exception:  # arguments that do not fit the format: the template still says what
        return safe_str(record.msg)


def route_stdlib_logging(
    logger: FilteringBoundLogger,
    *,
    interval: float = REPEAT_INTERVAL_S,
    clock: Callable[[], float] = time.monotonic,
) -> StdlibHandler:
    """Send every stdlib ``logging`` record (aiohttp's, asyncio's, any library's) to ``logger``.

    One handler goes on the root logger and on the ``aiohttp`` and ``asyncio`` loggers, which
    stop propagating: their records are written once, as JSON, even if something else adds a
    plain-text handler to the root. Levels are left as they are (the root's WARNING by default).
    Calling it again replaces the handler it installed before, after writing its counts: there
    is only ever one.
    """
    handler = StdlibHandler(logger, interval=interval, clock=clock)
    for name in (None, *_ROUTED):
        target = logging.getLogger(name)
        for old in [h for h in target.handlers if isinstance(h, StdlibHandler)]:
            old.flush()
            target.removeHandler(old)
        target.addHandler(handler)
        if name is not None:
            target.propagate = False
    return handler
