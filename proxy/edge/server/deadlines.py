"""A connection's deadlines: its head's and its idle keep-alive's on one timer, and its send's.

nginx's ``client_header_timeout`` and ``keepalive_timeout``: a head must be whole within
``header_timeout`` of its first byte (else the connection is aborted), and a connection idle
before its first request or between two is closed after ``keepalive_timeout``. A request costs
no timer of its own: the one timer, armed for the earliest deadline, looks again when it fires.
``send_timeout`` (nginx's too) is armed only while the agent takes nothing of what is written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Deadlines:
    """One connection's deadlines. ``late`` is called when a head was not whole in time, or
    the agent took nothing for the send timeout; ``idle`` says whether the connection is still
    idle, and ``close`` closes it."""

    __slots__ = ("_close", "_idle", "_late", "_loop", "_send", "_timer", "head_by", "idle_until")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        late: Callable[[], None],
        idle: Callable[[], bool],
        close: Callable[[], None],
    ) -> None:
        self._loop, self._late, self._idle, self._close = loop, late, idle, close
        self._timer: asyncio.TimerHandle | None = None
        self._send: asyncio.TimerHandle | None = None
        #: when the head being read must be whole (``None``: no head is being read)
        self.head_by: float | None = None
        #: when the connection closes if it is still idle (``None``: it is not idle)
        self.idle_until: float | None = None

    def head(self, seconds: float) -> None:
        """A head began (or its wait begins again): it must be whole within ``seconds``."""
        self.head_by = self._loop.time() + seconds
        self._arm(self.head_by)

    def idle(self, seconds: float) -> None:
        """The connection is idle: it closes in ``seconds`` unless a request begins."""
        self.idle_until = self._loop.time() + seconds
        self._arm(self.idle_until)

    def sending(self, seconds: float) -> None:
        """The agent stopped taking what is written: it has ``seconds`` to take more."""
        if self._send is None:
            self._send = self._loop.call_later(seconds, self._late)

    def sent(self) -> None:
        """The agent takes what is written again (or the connection is gone)."""
        if self._send is not None:
            self._send.cancel()
            self._send = None

    def cancel(self) -> None:
        """Neither the head's nor the idle deadline holds any more (the connection closes)."""
        self.head_by = self.idle_until = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self, when: float) -> None:
        """The timer fires no later than ``when``."""
        timer = self._timer
        if timer is not None:
            if timer.when() <= when:
                return
            timer.cancel()
        self._timer = self._loop.call_at(when, self._tick)

    def _tick(self) -> None:
        """A deadline may have passed: a head not whole in time is cut, an idle connection
        closed; otherwise the timer waits for the next deadline."""
        self._timer = None
        now = self._loop.time()
        head_by, idle_until = self.head_by, self.idle_until
        if head_by is not None:
            if now >= head_by:
                self._late()
            else:
                self._arm(head_by)
        elif idle_until is not None and self._idle():
            if now >= idle_until:
                self._close()
            else:
                self._arm(idle_until)
