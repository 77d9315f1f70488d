"""One agent's HTTP/1 connection: llhttp (``httptools``) reads its requests, one runs at a time.

An asyncio Protocol, as uvicorn's ``httptools`` server is built: each request head parsed
becomes aiohttp's ``BaseRequest`` (``head.py``) and runs as one task; its body streams into the
request's ``StreamReader`` as it arrives, the socket paused while the reader is full. Requests
pipelined behind it wait their turn (at most ``max_queued``: llhttp is fed 2 KiB at a time,
and past the cap the rest of a read waits unparsed and the socket is not read).
Responses go out through aiohttp's ``StreamWriter``, so every response class keeps working.

What nginx and Envoy bound by default is bounded here (``limits.py`` says what and how):
timeouts for a head and for an idle connection (``deadlines.py``), head sizes checked as bytes
arrive, a send timeout; a request mend refuses itself gets an envelope with a request id
(``answering.py``), and the connection closes after it. A request line that is not HTTP/1.0
or 1.1, or framing ``framing.py`` refuses, is refused before the request starts (``head.py``);
a chunked body that breaks off fails its request's body read with the ``MalformedRequest`` (a
400), or refuses it whole if it has not started.

A request starts only once the piece of bytes holding its head is parsed (``framing.py``); an
upgrade mend does not make is framed anew (``_reframe``), and what follows a WebSocket
handshake waits for its answer (``_hold``).

An agent that hangs up mid-request fails its request's body read and response writes with
``ConnectionResetError`` (the proxy's 499); so does one that half-closes while its request
runs, as nginx (``proxy_ignore_client_abort off``) and aiohttp read a FIN. After a response,
a body the handler did not read is read and dropped (``answering.drained``). At shutdown, no new
request is read, but the body of one running is.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, cast

import httptools
from aiohttp import web
from aiohttp.base_protocol import BaseProtocol
from aiohttp.http import RawRequestMessage
from aiohttp.http_writer import StreamWriter
from aiohttp.streams import EMPTY_PAYLOAD, StreamReader

from proxy.edge.failures import HeadersTooLarge, MalformedRequest, ProxyFailure
from proxy.edge.server import answering, framing, head
from proxy.edge.server.deadlines import Deadlines
from proxy.edge.server.framing import Upgrade
from proxy.edge.server.owner import Handler, Owner
from proxy.edge.upstream.connection import Sink

#: How much of a request body is held before the socket stops being read (aiohttp's limit).
BODY_BUFFER = 2**16
#: The most bytes llhttp parses at once: the queue is looked at between two pieces, so one read
#: queues at most the requests one piece holds (about a hundred of the smallest) past its cap.
FEED_PIECE = 2048


class AgentConnection(BaseProtocol):
    """One agent's connection (see the module's docstring)."""

    def __init__(self, server: Owner[AgentConnection]) -> None:
        super().__init__(server.loop)
        self.server, self.limits = server, server.limits
        self.parser = httptools.HttpRequestParser(self)
        self.peername: Any = None
        self.sockname: Any = None
        self.ssl_context: Any = None
        #: a response went out on this connection: between requests it is an idle keep-alive
        self.served = False
        #: past the connection cap: its first request is answered with a 503 and it closes
        self.over_limit = False
        #: the head being parsed
        self._head = head.Reading(self.limits)
        #: the body being parsed into a request's reader
        self._body: StreamReader | None = None
        #: requests parsed, waiting their turn, each with what answers it
        self._queue: deque[tuple[web.BaseRequest, Handler]] = deque()
        self._current: web.BaseRequest | None = None
        self._task: asyncio.Task[None] | None = None
        #: the head's and the idle keep-alive's deadlines, on one timer
        self.deadlines = Deadlines(
            self._loop, late=self._abort, idle=self._idle_open, close=self._close
        )
        #: no request after the one running (refused, closing, shut down, tunnelled)
        self._closing = False
        #: a request was refused: nothing after it is read
        self._refused = False
        #: the request whose head llhttp handed over and whose message is not whole yet: refused
        #: whole if llhttp refuses what follows its head (a post-head check, a chunk line) before
        #: it started (the piece holding its head not parsed yet, or a request ahead of it)
        self._parsing: web.BaseRequest | None = None
        #: what follows the head being parsed, when llhttp reads it as an upgrade
        self._following: Upgrade = Upgrade.NONE
        #: the framing fields of a request read as an upgrade mend does not make (``_reframe``)
        self._framing_head = b""
        #: a fresh parser is being told a request's framing (``_reframe``): no request begins
        self._framing = False
        #: an upgrade request's head was parsed: what follows is not HTTP until it is answered
        self._upgrade = False
        #: the upgrade request whose answer decides what ``_tail`` is
        self._upgrading: web.BaseRequest | None = None
        self._tail = b""
        self._sink: Sink | None = None
        #: bytes read but not parsed while ``max_queued`` requests wait (``_feed``)
        self._pending = b""

    # --- the transport --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.peername = transport.get_extra_info("peername")
        self.sockname = transport.get_extra_info("sockname")
        self.ssl_context = transport.get_extra_info("sslcontext")
        self.server.connection_made(self, cast(asyncio.Transport, transport))
        self.deadlines.idle(self.limits.keepalive_timeout)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.server.connection_lost(self)
        super().connection_lost(exc)
        self._closing = True
        self.deadlines.cancel()
        self.deadlines.sent()
        self._queue.clear()
        self._pending = b""
        lost = exc if exc is not None else ConnectionResetError("Connection lost")
        if self._body is not None:
            self._body.set_exception(lost)
            self._body = None
        if self._current is not None:
            self._current._cancel(lost)
        if self._sink is not None:
            self._sink.feed_eof()

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._sink is None:  # (a tunnel has its idle timeout)
            self.deadlines.sending(self.limits.send_timeout)

    def resume_writing(self) -> None:
        self.deadlines.sent()
        super().resume_writing()

    def pause_reading(self) -> None:
        self._reading_paused = True
        self._pause_transport_reading()

    def resume_reading(self, resume_parser: bool = True) -> None:
        self._reading_paused = False
        if not self._buffer_paused:
            self._resume_transport_reading()

    def data_received(self, data: bytes) -> None:
        if self._sink is not None:
            self._sink.feed_data(data)
            return
        if self._refused or (self._closing and self._body is None):
            return  # (a body still arriving is read: its request runs to its end)
        if self._upgrade:  # held until the upgrade is answered (a tunnel, or HTTP again)
            self._tail += data
            if len(self._tail) > self.limits.max_head:
                self._pause_reading_for_buffer()
            return
        if self._pending:  # parsing waits for the queue (the socket is paused)
            self._pending += data
            return
        self._feed(data)

    def _feed(self, data: bytes) -> None:
        """``data`` to llhttp, ``FEED_PIECE`` bytes at a time: once ``max_queued`` requests wait,
        the rest is kept unparsed (``_pending``) and the socket paused until one runs. (llhttp
        cannot be paused between two requests: a whole read fed at once would queue every
        request in it.) A request starts only once the piece holding its head is parsed."""
        size, start = len(data), 0
        while start < size:
            piece = data if size <= FEED_PIECE else data[start : start + FEED_PIECE]
            start += len(piece)
            self._head.size += len(piece) if self._head.active or self._current is None else 0
            try:
                self.parser.feed_data(piece)
            except httptools.HttpParserUpgrade as exc:
                rest = piece[exc.args[0] :] + data[start:]
                if self._following is not Upgrade.PLAIN:
                    self._hold(rest)
                    return
                if not self._reframe():
                    return
                data, size, start = rest, len(rest), 0  # the same request's body, and on
                continue
            except head.Refuse as exc:
                self._refuse(exc.failure)
                return
            except httptools.HttpParserError as exc:
                if isinstance(exc.__context__, head.Refuse):
                    self._refuse(exc.__context__.failure)
                else:
                    self._refuse(MalformedRequest(str(exc)[:200] or type(exc).__name__))
                return
            self._start()
            if self._head.active and self._head.size > self.limits.max_head:
                self._refuse(HeadersTooLarge("request head too large", limit=self.limits.max_head))
                return
            if start < size and len(self._queue) >= self.limits.max_queued:
                self._pending = data[start:]
                self._pause_reading_for_buffer()
                self.deadlines.head_by = None  # a head cut here is mend's wait, not the agent's
                return
        self._start()

    def _start(self) -> None:
        """llhttp read past the heads handed over: the first request waiting runs, if none does."""
        if self._current is None and self._queue:
            self._next()

    def _hold(self, tail: bytes) -> None:
        """An upgrade request's head: what follows waits until the request is answered (a
        WebSocket tunnel takes it, or it is HTTP again); after a CONNECT, nothing is read."""
        self._upgrade = True
        if self._following is Upgrade.CONNECT:
            self._closing = True
        else:
            self._tail = tail
        # the request asking it: the last parsed (requests may still run ahead of it)
        self._upgrading = self._queue[-1][0] if self._queue else self._current
        self._following = Upgrade.NONE
        self._start()

    def _reframe(self) -> bool:
        """llhttp stopped at an upgrade mend does not make, skipping the body: a fresh parser is
        told the request's own framing fields (``framing.framing_head``) and reads its body and
        what follows, by the same rules. ``False``: it refused them (the request is refused)."""
        self._following = Upgrade.NONE
        self.parser = httptools.HttpRequestParser(self)
        self._framing = True
        try:
            self.parser.feed_data(self._framing_head)
        except httptools.HttpParserError as exc:
            self._framing = False
            self._refuse(MalformedRequest(str(exc)[:200] or type(exc).__name__))
            return False
        self._framing = False
        return True

    # --- llhttp's callbacks ---------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._closing or self._framing:  # behind a body read while closing: no new request
            return
        self._head.begin()
        deadlines = self.deadlines
        deadlines.idle_until = None
        if deadlines.head_by is None:
            deadlines.head(self.limits.header_timeout)

    def on_url(self, url: bytes) -> None:
        if not self._framing:
            self._head.url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._framing:
            self._head.field(name, value)

    def on_headers_complete(self) -> None:
        if (self._closing and not self._head.active) or self._framing:
            return
        reading = self._head
        reading.active, reading.size = False, 0
        self.deadlines.head_by = self.deadlines.idle_until = None
        parser = self.parser
        method = parser.get_method().decode("ascii", "replace")
        keep_alive = parser.should_keep_alive() and method != "CONNECT"
        try:
            message, read = head.parsed(
                method,
                parser.get_http_version(),
                self._head.target,
                self._head.raw,
                keep_alive=keep_alive,
                upgrade=parser.should_upgrade(),
            )
        except ProxyFailure as exc:
            raise head.Refuse(exc) from None
        if read.following is Upgrade.PLAIN:  # llhttp skips this body: a fresh parser frames it
            self._framing_head = framing.framing_head(method, self._head.raw, keep_alive)
        self._following = read.following
        reader = EMPTY_PAYLOAD
        if read.body:
            reader = self._body = StreamReader(self, BODY_BUFFER, loop=self._loop)
        request = self._request(message, reader)
        self._queue.append((request, self.server.handler))
        self._parsing = request
        if len(self._queue) >= self.limits.max_queued:
            self._pause_reading_for_buffer()

    def on_body(self, body: bytes) -> None:
        if self._body is not None:
            self._body.feed_data(body)

    def on_message_complete(self) -> None:
        if self._following is Upgrade.PLAIN:  # the body llhttp skipped: framed by ``_reframe``
            return
        self._parsing = None
        if self._body is not None:
            self._body.feed_eof()
            self._body = None

    # --- running requests -----------------------------------------------------------------------

    def _request(self, message: RawRequestMessage, body: StreamReader) -> web.BaseRequest:
        writer = StreamWriter(self, self._loop)
        # the task is set when it runs (``_next``); aiohttp's request reads what it needs of
        # its protocol (transport, peer, TLS context) from this one
        protocol: Any = self
        return web.BaseRequest(message, body, protocol, writer, _NO_TASK, self._loop)

    def _next(self) -> None:
        request, handler = self._queue.popleft()
        self._current = request
        self._task = task = self._loop.create_task(self._run(request, handler))
        request._task = task
        if len(self._queue) < self.limits.max_queued:
            if self._pending and not self._closing:  # the bytes held while the queue was full
                pending, self._pending = self._pending, b""
                if self._head.active:  # its deadline, from now
                    self.deadlines.head(self.limits.header_timeout)
                self._feed(pending)
            if self._buffer_paused and not self._pending:
                self._resume_reading_for_buffer()

    async def _run(self, request: web.BaseRequest, handler: Handler) -> None:
        try:
            try:
                response = await answering.answer(self.server, request, handler, self._abort)
            except asyncio.CancelledError:
                self._closing = True
                raise
            if response is None:
                self._closing = True
            else:
                self.served = True
                await self._after(request, response)
        finally:
            self._current = self._task = None
            request._task = _NO_TASK  # no cycle through the task
        if self._closing or self.transport is None:
            self._close()
        elif self._upgrade and self._sink is None and request is self._upgrading:
            self._http_again()
        elif self._queue:
            self._next()
        elif not self._head.active:  # (a head arriving has its own deadline: not idle)
            self.deadlines.idle(self.limits.keepalive_timeout)

    async def _after(self, request: web.BaseRequest, response: web.StreamResponse) -> None:
        """Whether the connection goes on: the response's say, and the body read to its end."""
        if not response.keep_alive:
            self._closing = True
        if self.transport is None or self._sink is not None or request.content.is_eof():
            return
        if not await answering.drained(request, self.limits.lingering_s):
            self._closing = True

    def _refuse(self, failure: ProxyFailure) -> None:
        """The request being parsed is refused: its envelope, after those before it; then the
        connection closes."""
        self.deadlines.head_by = None
        parsing, self._parsing = self._parsing, None
        if any(entry[0] is parsing for entry in self._queue):  # never started: refused whole
            self._queue = deque(entry for entry in self._queue if entry[0] is not parsing)
            self._body = None
        elif self._body is not None:  # a body that breaks off (a bad chunk): its request ends too
            self._body.set_exception(failure)
            self._body = None
            self._closing = True
            return
        self._refused, self._head.active = True, False
        message = head.refused(self._head.target, self.parser.get_method, self.limits.max_line)
        request = self._request(message, EMPTY_PAYLOAD)
        refusal = answering.refusal
        self._queue.append((request, lambda r: answering.refused(refusal(self.server, r, failure))))
        if self._current is None:
            self._next()

    def _http_again(self) -> None:
        """An upgrade the upstream declined: what came after its head is HTTP again."""
        self._upgrade, self._upgrading = False, None
        self.parser = httptools.HttpRequestParser(self)
        tail, self._tail = self._tail, b""
        if self._buffer_paused and len(self._queue) < self.limits.max_queued:
            self._resume_reading_for_buffer()
        self.deadlines.idle(self.limits.keepalive_timeout)
        if tail:
            self.data_received(tail)

    # --- the tunnel, closing --------------------------------------------------------------------

    def _idle_open(self) -> bool:
        """Idle, and not a tunnel's (a tunnel has its own idle timeout)."""
        return self.is_idle and self._sink is None

    def set_parser(self, sink: Sink) -> None:
        """A tunnel takes the connection: every byte from now on (and those already read after
        the upgrade request's head) goes to ``sink``."""
        self._sink = sink
        tail, self._tail = self._tail, b""
        if tail:
            sink.feed_data(tail)
        if self._buffer_paused:
            self._resume_reading_for_buffer()

    def keep_alive(self, value: bool) -> None:
        """``False``: no request after the one running."""
        if not value:
            self._closing = True

    @property
    def is_idle(self) -> bool:
        """No request running, queued or being read."""
        return self._current is None and not self._queue and not self._head.active

    def close_idle(self) -> None:
        """Shutting down: no new request; an idle connection is closed now."""
        self._closing = True
        if self._idle_open():
            self._close()

    async def shutdown(self, timeout: float | None) -> None:  # noqa: ASYNC109 (a grace, not a deadline)
        """Let the request running finish within ``timeout``; then cancel it and close."""
        self._closing = True
        if self._task is not None:
            await answering.finish(self._task, self._current, timeout)
        self._close()

    def _close(self) -> None:
        self.deadlines.cancel()
        if self.transport is not None:
            self.transport.close()

    def _abort(self) -> None:
        self._closing = True
        self.deadlines.cancel()
        if self.transport is not None:
            self.transport.abort()

    def force_close(self) -> None:
        """Closed now, whatever it is doing (a connection closed to make room at the cap)."""
        self._closing = True
        self._close()


#: a request's task until it runs, and after (aiohttp's request holds one)
_NO_TASK: Any = None
