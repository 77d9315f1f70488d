"""Relaying an upgraded connection (a WebSocket): the upstream's 101 to the agent, then bytes.

mend does not speak WebSocket. Like nginx and Envoy, once the upstream has switched protocols it
relays bytes both ways as they arrive, so frames, fragmentation, ping/pong, close codes, the
subprotocol and extensions (permessage-deflate) are whatever the two ends negotiated: the
upgrade request reaches the upstream with the agent's ``Sec-WebSocket-*`` headers, and the
upstream's 101 reaches the agent with its own. Which requests are relayed as upgrades is
``proxy.edge.forward.wants_upgrade`` (``Upgrade: websocket`` only).

Bounds, whatever either side sends:

- **backpressure**: a side's write buffer past ``HIGH_WATER`` stops reading from the other side
  until it drains to ``LOW_WATER``; a tunnel holds at most about ``HIGH_WATER`` plus one socket
  read per direction for a peer that does not read;
- **idle timeout**: no byte either way for the route's ``idle_timeout`` aborts both sides (a
  peer that reads nothing for that long, holding the other side paused, counts as idle too);
- **close**: a side that closes closes the other once what was relayed to it is flushed (at most
  ``FLUSH_S``; then it is aborted). TCP half-close is not relayed: aiohttp closes a connection at
  the peer's FIN, and a WebSocket ends with its close frames anyway;
- **shutdown**: ``stop`` ends a session at once (mend's ``pre_shutdown``): past that aiohttp
  stops reading agents, and a tunnel must not go on relaying one way.

Each side's protocol hands every byte it reads after the upgrade to a ``_Relay`` writing them to
the other side: the agent's aiohttp ``RequestHandler`` through ``set_parser``, as aiohttp's own
WebSocket classes do; the upstream's ``proxy.edge.upstream.Connection`` through ``relay_to``,
which first gives the bytes the upstream sent right behind its 101.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from aiohttp import web
from aiohttp.http_writer import StreamWriter
from multidict import CIMultiDict

from proxy.edge.failures import UpstreamProtocolError
from proxy.edge.forward import wants_upgrade
from proxy.edge.upstream import Connection, Response

#: A side's write buffer above this stops reading from the other side (bytes) ...
HIGH_WATER = 64 << 10
#: ... until it is down to this.
LOW_WATER = 16 << 10
#: Seconds a closing side has to take the bytes already relayed to it before it is aborted.
FLUSH_S = 5.0


class ClosedBy(StrEnum):
    """What ended a session: the side whose connection ended first, or mend."""

    AGENT = "agent"
    UPSTREAM = "upstream"
    TIMEOUT = "timeout"  # no byte either way for the idle timeout
    ERROR = "error"  # a relay failed (mend's side)
    SHUTDOWN = "shutdown"  # mend is stopping


class Side(Protocol):
    """One end of a tunnel, as its protocol shows it (the agent's or the upstream's)."""

    @property
    def transport(self) -> asyncio.Transport | None: ...

    @property
    def writing_paused(self) -> bool: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class Count(Protocol):
    """Where relayed bytes are counted (a Prometheus counter's child)."""

    def inc(self, amount: float = 1) -> None: ...


@dataclass(frozen=True, slots=True)
class Session:
    """One tunnel's summary, for its log line and metrics."""

    closed_by: ClosedBy
    duration_s: float
    to_upstream: int
    to_agent: int


class _Relay:
    """The parser a side's protocol feeds every byte it reads: each chunk goes to the other side's
    transport as it is, and reading stops while that transport's buffer is over the mark.

    Both protocols call ``feed_data`` with each read and ``feed_eof`` when their connection is
    lost; aiohttp's may also call ``set_exception``.
    """

    __slots__ = ("_drained", "bytes", "count", "drain", "lost", "side", "sink", "source", "tunnel")

    def __init__(
        self,
        tunnel: Tunnel,
        side: ClosedBy,
        source: Side,
        sink: Side,
        drain: Callable[[], Awaitable[None]],
        count: Count | None,
    ) -> None:
        self.tunnel = tunnel
        self.side = side  # who ended the session when the source's connection ends
        self.source = source
        self.sink = sink
        self.drain = drain  # until the sink's write buffer is below its low mark
        self.count = count
        self.bytes = 0
        self.lost = asyncio.Event()
        self._drained: asyncio.Task[None] | None = None

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        """Relay one read; ``(False, b"")`` tells the protocol the stream goes on."""
        tunnel = self.tunnel
        transport = self.sink.transport
        if tunnel.ended is not None or transport is None or not data:
            return False, b""  # the other side is gone: nobody left to give these to
        tunnel.last_byte = tunnel.loop.time()
        transport.write(data)
        self.bytes += len(data)
        if self.count is not None:
            self.count.inc(len(data))
        if self.sink.writing_paused and self._drained is None:
            self.source.pause_reading()
            self._drained = tunnel.loop.create_task(self._resume_when_drained())
        return False, b""

    async def _resume_when_drained(self) -> None:
        try:
            await self.drain()
        except ConnectionError:
            return  # the sink is gone; the tunnel is ending
        finally:
            self._drained = None
        if self.tunnel.ended is None:
            self.source.resume_reading()

    def feed_eof(self) -> None:
        """The source's connection is lost."""
        self.lost.set()
        self.tunnel.end(self.side)

    def set_exception(self, exc: BaseException, exc_cause: BaseException | None = None) -> None:
        self.tunnel.end(ClosedBy.ERROR)

    def is_eof(self) -> bool:
        return self.lost.is_set()

    def stop(self) -> None:
        if self._drained is not None:
            self._drained.cancel()


class Tunnel:
    """An upgraded agent connection and upstream connection, relayed to each other.

    ``open`` sends the upstream's 101 to the agent; ``run`` relays until a side closes, the idle
    timeout, or ``stop`` (mend shutting down), and returns the session's summary. The upstream
    connection is closed, never pooled again, whatever happens.
    """

    def __init__(
        self,
        request: web.BaseRequest,
        upstream: Response,
        *,
        idle_timeout: float,
        counts: tuple[Count, Count] | None = None,
    ) -> None:
        """Raises ``UpstreamProtocolError`` for a 101 that cannot be relayed: one the agent did
        not ask for, or one without ``Upgrade`` and ``Connection: upgrade`` (aiohttp would parse
        the bytes after it as HTTP)."""
        up = upstream.connection
        if not wants_upgrade(request.headers):
            raise UpstreamProtocolError("101 Switching Protocols to a request asking no upgrade")
        if not up.upgraded:
            raise UpstreamProtocolError("101 Switching Protocols without Upgrade")
        self.loop = asyncio.get_running_loop()
        self.request, self.upstream, self.idle_timeout = request, upstream, idle_timeout
        self.agent_protocol = request.protocol
        self.upstream_protocol: Connection = up
        # kept: the protocols forget theirs as they close; a side may already be gone
        self._agent_transport = request.transport
        self._upstream_transport = up.transport
        self._transports = [t for t in (self._agent_transport, self._upstream_transport) if t]
        #: set once both protocols feed the relays below
        self._attached = False
        self.ended: ClosedBy | None = None
        self.last_byte = self.loop.time()
        self._started = time.perf_counter()
        self._duration_s: float | None = None
        self._ended = self.loop.create_future()
        self._idle: asyncio.TimerHandle | None = None
        to_up, to_agent = counts if counts is not None else (None, None)
        agent_side, upstream_side = self.agent_protocol, self.upstream_protocol
        agent_drain = StreamWriter(agent_side, self.loop).drain
        self.up = _Relay(self, ClosedBy.AGENT, agent_side, upstream_side, up.drain, to_up)
        self.down = _Relay(
            self, ClosedBy.UPSTREAM, upstream_side, agent_side, agent_drain, to_agent
        )

    async def open(self, headers: CIMultiDict[str]) -> web.StreamResponse:
        """Send the agent the upstream's 101 with ``headers`` (its end-to-end ones; the two
        hop-by-hop ones a switch needs are added). An agent already gone ends the session."""
        headers["Upgrade"] = self.upstream.headers.get("Upgrade", "websocket")
        headers["Connection"] = "Upgrade"
        response = web.StreamResponse(status=101, reason=self.upstream.reason, headers=headers)
        response.force_close()  # no HTTP on this connection after the tunnel
        try:
            await response.prepare(self.request)
        except ConnectionError:
            self.end(ClosedBy.AGENT)
        return response

    async def run(self) -> Session:
        """Relay both ways until the session ends; then close both sides."""
        try:
            if self.ended is None:
                self._attach()
                self._idle = self.loop.call_at(self.last_byte + self.idle_timeout, self._tick)
            by = await self._ended
            await self._close(by)
        except asyncio.CancelledError:
            self.end(ClosedBy.SHUTDOWN)
            self._abort()
            raise
        finally:
            self._finish()
        return self.summary()

    def stop(self) -> None:
        """End the session now (mend is shutting down): both sides are closed, then flushed."""
        self.end(ClosedBy.SHUTDOWN)

    def end(self, by: ClosedBy) -> None:
        """The session is over, for ``by``; the first reason given is the one kept."""
        if self.ended is None:
            self.ended = by
            self._duration_s = time.perf_counter() - self._started
            if not self._ended.done():
                self._ended.set_result(by)

    def summary(self) -> Session:
        duration = self._duration_s
        if duration is None:
            duration = time.perf_counter() - self._started
        return Session(self.ended or ClosedBy.ERROR, duration, self.up.bytes, self.down.bytes)

    # --- internals ------------------------------------------------------------------------------

    def _attach(self) -> None:
        agent, upstream = self.agent_protocol, self.upstream_protocol
        for transport in self._transports:
            transport.set_write_buffer_limits(high=HIGH_WATER, low=LOW_WATER)
        # the upstream first: the bytes it sent right after its 101 (its parser's tail) go to the
        # agent now, behind the 101; then what the agent sent after its request head, upstream
        upstream.relay_to(self.down)
        agent.set_parser(self.up)  # type: ignore[arg-type]  # feed_data/feed_eof is all it uses
        agent.keep_alive(False)
        self._attached = True
        # a side lost before its parser was set had no one to tell: look
        if agent.transport is None:
            self.up.feed_eof()  # (``relay_to`` told the upstream's relay already)

    def _tick(self) -> None:
        deadline = self.last_byte + self.idle_timeout
        if self.loop.time() >= deadline:
            self._idle = None
            self.end(ClosedBy.TIMEOUT)
        else:
            self._idle = self.loop.call_at(deadline, self._tick)

    async def _close(self, by: ClosedBy) -> None:
        """After a side closed, close the other once flushed; at shutdown, both; after a timeout
        or an error (or before the relays were attached), abort both."""
        if by in (ClosedBy.TIMEOUT, ClosedBy.ERROR) or not self._attached:
            self._abort()
            return
        waits = []
        if by is not ClosedBy.AGENT and self._agent_transport is not None:
            self._agent_transport.close()  # sends what is buffered first
            waits.append(self.up.lost.wait())
        if by is not ClosedBy.UPSTREAM and self._upstream_transport is not None:
            self._upstream_transport.close()
            waits.append(self.down.lost.wait())
        try:
            async with asyncio.timeout(FLUSH_S):
                await asyncio.gather(*waits)
        except TimeoutError:
            self._abort()

    def _abort(self) -> None:
        for transport in self._transports:
            transport.abort()

    def _finish(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        self.up.stop()
        self.down.stop()
        self.upstream.close()  # releases the connection closed: never back in the pool
