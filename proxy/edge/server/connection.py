"""One agent's HTTP/1 connection: llhttp (``httptools``) reads its requests, one runs at a time.

An asyncio Protocol, as uvicorn's ``httptools`` server is built: each request head parsed
becomes aiohttp's ``BaseRequest`` (``head.py``) and runs as one task; its body streams into the
request's ``StreamReader`` as it arrives, the socket paused while the reader is full. Requests
pipelined behind it wait their turn (at most ``max_queued``: llhttp is fed 2 KiB at a time,
and past the cap the rest of a read waits unparsed and the socket is not read).
Responses go out through aiohttp's ``StreamWriter``, so every response class keeps working.

What nginx and Envoy bound by default is bounded here (``limits.py``):

- a **header timeout**: from the first byte of a request head to its last; a client dripping its
  headers is disconnected, whatever the keep-alive timer says;
- a **keep-alive timeout**: a connection idle before its first request or between two is closed;
- **head sizes**: the target (414), each field, the field count and the whole head (431), checked
  as bytes arrive, never after buffering them;
- a **send timeout**: a response the agent takes nothing of for ``send_timeout`` is aborted;
- **envelopes for requests mend refuses itself** (400, 414, 431, a handler's bug as 500), with a
  request id and one log line, through the server's ``refuse``; the connection closes after it.
  A request line that is not HTTP/1.0 or 1.1, or framing ``framing.py`` refuses, is refused
  before the request starts; a chunked body that breaks off fails its request's body read with
  the ``MalformedRequest`` (a 400), or refuses it whole if it has not started.

A request starts only once the piece of bytes holding its head is parsed, so that what llhttp
refuses right after a head (an invalid ``Transfer-Encoding``, the first chunk line) refuses a
request of which nothing went upstream; an upgrade mend does not make is framed anew
(``_reframe``), and what follows a WebSocket handshake waits for its answer (``_hold``).

An agent that hangs up mid-request fails its request's body read and response writes with
``ConnectionResetError`` (the proxy's 499); so does one that half-closes while its request
runs, as nginx (``proxy_ignore_client_abort off``) and aiohttp read a FIN. After a response,
a body the handler did not read is read and dropped for up to ``lingering_s`` so the agent sees
the response, whether
the connection then stays open or closes; a request whose ``Expect: 100-continue`` body has not
begun is closed at once. At shutdown, no new request is read, but the body of one running is.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

import httptools
from aiohttp import web
from aiohttp.base_protocol import BaseProtocol
from aiohttp.http import RawRequestMessage
from aiohttp.http_writer import StreamWriter
from aiohttp.streams import EMPTY_PAYLOAD, StreamReader

from proxy.edge.failures import (
    HeadersTooLarge,
    MalformedRequest,
    ProxyBug,
    ProxyFailure,
    UnsupportedTransferCoding,
    UriTooLong,
)
from proxy.edge.rawhead import decoded
from proxy.edge.server import framing, head
from proxy.edge.server.framing import Upgrade
from proxy.edge.upstream.connection import Sink

if TYPE_CHECKING:
    from proxy.edge.server.listener import AgentServer

Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]

#: How much of a request body is held before the socket stops being read (aiohttp's limit).
BODY_BUFFER = 2**16
#: The most bytes llhttp parses at once: the queue is looked at between two pieces, so one read
#: queues at most the requests one piece holds (about a hundred of the smallest) past its cap.
FEED_PIECE = 2048


class _Refuse(Exception):
    """Stops the parser: the request is refused with ``failure``."""

    def __init__(self, failure: ProxyFailure) -> None:
        super().__init__(str(failure))
        self.failure = failure


class AgentConnection(BaseProtocol):
    """One agent's connection (see the module's docstring)."""

    def __init__(self, server: AgentServer) -> None:
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
        # the head being parsed
        self._in_head = False
        self._head_bytes = 0
        self._target = b""
        self._raw: list[tuple[bytes, bytes]] = []
        #: the body being parsed into a request's reader
        self._body: StreamReader | None = None
        #: requests parsed, waiting their turn, each with what answers it
        self._queue: deque[tuple[web.BaseRequest, Handler]] = deque()
        self._current: web.BaseRequest | None = None
        self._task: asyncio.Task[None] | None = None
        #: one timer for both deadlines, re-armed only when it fires or must fire sooner
        self._timer: asyncio.TimerHandle | None = None
        #: when the head being read must be whole (``None``: no head is being read)
        self._head_by: float | None = None
        #: when this connection closes if it is still idle (``None``: it is not idle)
        self.idle_until: float | None = None
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
        #: armed while the agent does not take what is written to it (``send_timeout``)
        self._send_timer: asyncio.TimerHandle | None = None
        #: bytes read but not parsed while ``max_queued`` requests wait (``_feed``)
        self._pending = b""

    # --- the transport --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.peername = transport.get_extra_info("peername")
        self.sockname = transport.get_extra_info("sockname")
        self.ssl_context = transport.get_extra_info("sslcontext")
        self.server.connection_made(self, cast(asyncio.Transport, transport))
        self._wait_idle()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.server.connection_lost(self)
        super().connection_lost(exc)
        self._closing = True
        self._cancel_timers()
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None
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
        if self._sink is None and self._send_timer is None:  # (a tunnel has its idle timeout)
            self._send_timer = self._loop.call_later(self.limits.send_timeout, self._abort)

    def resume_writing(self) -> None:
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None
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
            self._head_bytes += len(piece) if self._in_head or self._current is None else 0
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
            except _Refuse as exc:
                self._refuse(exc.failure)
                return
            except httptools.HttpParserError as exc:
                if isinstance(exc.__context__, _Refuse):
                    self._refuse(exc.__context__.failure)
                else:
                    self._refuse(MalformedRequest(str(exc)[:200] or type(exc).__name__))
                return
            self._start()
            if self._in_head and self._head_bytes > self.limits.max_head:
                self._refuse(HeadersTooLarge("request head too large", limit=self.limits.max_head))
                return
            if start < size and len(self._queue) >= self.limits.max_queued:
                self._pending = data[start:]
                self._pause_reading_for_buffer()
                self._head_by = None  # a head cut here is mend's wait, not the agent's
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
        self._in_head = True
        self._target, self._raw = b"", []
        self.idle_until = None
        if self._head_by is None:
            self._head_by = self._loop.time() + self.limits.header_timeout
            self._deadline(self._head_by)

    def on_url(self, url: bytes) -> None:
        if self._framing:
            return
        self._target += url
        if len(self._target) > self.limits.max_line:
            limit = self.limits.max_line
            raise _Refuse(UriTooLong(f"request target over {limit} bytes", limit=limit))

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._framing:
            return
        limits = self.limits
        if len(name) + len(value) + 2 > limits.max_field:
            raise _Refuse(
                HeadersTooLarge(
                    f"header field over {limits.max_field} bytes", limit=limits.max_field
                )
            )
        self._raw.append((name, value))
        if len(self._raw) > limits.max_headers:
            raise _Refuse(HeadersTooLarge("Too many headers", limit=limits.max_headers))

    def on_headers_complete(self) -> None:
        if (self._closing and not self._in_head) or self._framing:
            return
        self._in_head = False
        self.idle_until = None
        self._head_bytes = 0
        self._head_by = None
        parser = self.parser
        method = parser.get_method().decode("ascii", "replace")
        version = parser.get_http_version()
        if version not in head.VERSIONS:  # llhttp reads HTTP/0.9 and HTTP/2.0 request lines too
            raise _Refuse(MalformedRequest(f"HTTP/{version} is not HTTP/1.0 or HTTP/1.1"))
        headers = decoded(self._raw)
        keep_alive = parser.should_keep_alive() and method != "CONNECT"
        try:
            read = framing.read(method, head.VERSIONS[version], headers, parser.should_upgrade())
            message = head.message(
                method,
                self._target.decode("utf-8", "surrogateescape"),
                head.VERSIONS[version],
                headers,
                self._raw,
                read,
                keep_alive=keep_alive,
            )
        except head.InvalidTarget as exc:
            raise _Refuse(MalformedRequest(f"invalid request target {exc}")) from None
        except framing.InvalidFraming as exc:
            raise _Refuse(MalformedRequest(str(exc))) from None
        except framing.UnsupportedCoding as exc:
            raise _Refuse(UnsupportedTransferCoding(str(exc))) from None
        if read.following is Upgrade.PLAIN:  # llhttp skips this body: a fresh parser frames it
            self._framing_head = framing.framing_head(method, self._raw, keep_alive)
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
                if self._in_head:  # its deadline, from now
                    self._head_by = self._loop.time() + self.limits.header_timeout
                    self._deadline(self._head_by)
                self._feed(pending)
            if self._buffer_paused and not self._pending:
                self._resume_reading_for_buffer()

    async def _run(self, request: web.BaseRequest, handler: Handler) -> None:
        try:
            response = await self._answer(request, handler)
            if response is not None:
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
        elif not self._in_head:  # (a head arriving has its own deadline: not idle)
            self._wait_idle()

    async def _answer(
        self, request: web.BaseRequest, handler: Handler
    ) -> web.StreamResponse | None:
        """The response, sent; ``None`` when the agent is gone or the connection must close."""
        try:
            try:
                response = await handler(request)
            except Exception as exc:  # a bug above the edge: mend's envelope, not a traceback
                self.server.bug(exc)
                if request.writer.output_size > _CONTINUE:  # a response began: cut it, no other
                    self._abort()
                    return None
                response = self._refusal(request, ProxyBug(type(exc).__name__))
            await response.prepare(request)
            await response.write_eof()
        except ConnectionError:
            self._closing = True
            return None
        except asyncio.CancelledError:
            self._closing = True
            raise
        except Exception as exc:  # writing the response failed (a header mend cannot send)
            self.server.bug(exc)
            self._closing = True
            if request.writer.output_size == 0:
                await self._last_words(request, ProxyBug(type(exc).__name__))
            return None
        self.served = True
        return response

    async def _after(self, request: web.BaseRequest, response: web.StreamResponse) -> None:
        """Whether the connection goes on: the response's say, and the body read to its end.

        A body still arriving is read and dropped (for up to ``lingering_s``) even when the
        connection closes after the response: closed with unread bytes, the socket resets, and
        an agent still sending (a 413 mid-body) gets ECONNRESET instead of the response.

        An upstream that answered before it had the whole body (its response released, its
        body's send cancelled: ``proxy/edge/upstream/pool.py``) leaves that send still waiting
        on the body when this begins: it lets go on its next turn of the loop, and the rest of
        the body is read here, as direct (aiohttp's reader refuses a second reader, and the
        connection used to close with the agent still sending: client-suites B4)."""
        if not response.keep_alive:
            self._closing = True
        body = request.content
        if body.is_eof() or self.transport is None or self._sink is not None:
            return
        expect = request.headers.get("Expect", "").lower() == "100-continue"
        if expect and body.total_bytes == 0:
            self._closing = True  # no byte of it yet, maybe no 100 sent: it may never come
            return
        try:
            async with asyncio.timeout(self.limits.lingering_s):
                while not body.is_eof():
                    if body._waiter is not None:  # a reader cancelled, not yet unwound
                        await asyncio.sleep(0)
                        continue
                    await body.readany()
        except Exception:  # timed out, the agent gone, or its body broke off
            self._closing = True

    def _refusal(self, request: web.BaseRequest, failure: ProxyFailure) -> web.StreamResponse:
        response = self.server.refuse(request, failure)
        response.force_close()
        return response

    async def _last_words(self, request: web.BaseRequest, failure: ProxyFailure) -> None:
        try:
            response = self._refusal(request, failure)
            await response.prepare(request)
            await response.write_eof()
        except Exception as exc:  # nothing more can be said on this connection
            self.server.bug(exc)

    def _refuse(self, failure: ProxyFailure) -> None:
        """The request being parsed is refused: its envelope, after those before it; then the
        connection closes."""
        self._head_by = None
        parsing, self._parsing = self._parsing, None
        if any(entry[0] is parsing for entry in self._queue):  # never started: refused whole
            self._queue = deque(entry for entry in self._queue if entry[0] is not parsing)
            self._body = None
        elif self._body is not None:  # a body that breaks off (a bad chunk): its request ends too
            self._body.set_exception(failure)
            self._body = None
            self._closing = True
            return
        self._refused, self._in_head = True, False
        request = self._request(self._refused_message(), EMPTY_PAYLOAD)
        self._queue.append((request, lambda r: _answered(self._refusal(r, failure))))
        if self._current is None:
            self._next()

    def _refused_message(self) -> RawRequestMessage:
        """The refused request as far as it was read: its method and target once its request
        line was (the envelope's hint and the log line name them), else ``UNREADABLE``."""
        target = self._target  # this message's: emptied when it began
        if not target or len(target) > self.limits.max_line:
            return head.UNREADABLE
        try:
            method = self.parser.get_method().decode("ascii")
            text = target.decode("utf-8", "surrogateescape")
            url = head.target_url(method, text)
        except (ValueError, httptools.HttpParserError):
            return head.UNREADABLE
        return head.UNREADABLE._replace(method=method, path=text, url=url)

    def _http_again(self) -> None:
        """An upgrade the upstream declined: what came after its head is HTTP again."""
        self._upgrade, self._upgrading = False, None
        self.parser = httptools.HttpRequestParser(self)
        tail, self._tail = self._tail, b""
        if self._buffer_paused and len(self._queue) < self.limits.max_queued:
            self._resume_reading_for_buffer()
        self._wait_idle()
        if tail:
            self.data_received(tail)

    # --- timers, the tunnel, closing ------------------------------------------------------------

    def _wait_idle(self) -> None:
        self.idle_until = self._loop.time() + self.limits.keepalive_timeout
        self._deadline(self.idle_until)

    def _deadline(self, when: float) -> None:
        """The timer fires no later than ``when`` (a request costs no timer of its own: the one
        armed for an earlier deadline looks again when it fires)."""
        timer = self._timer
        if timer is not None:
            if timer.when() <= when:
                return
            timer.cancel()
        self._timer = self._loop.call_at(when, self._tick)

    def _tick(self) -> None:
        """A deadline may have passed: a head not whole in time is cut (the connection aborted),
        an idle connection closed; otherwise the timer waits for the next deadline."""
        self._timer = None
        now = self._loop.time()
        head_by, idle_until = self._head_by, self.idle_until
        if head_by is not None:
            if now >= head_by:
                self._abort()
            else:
                self._deadline(head_by)
        elif idle_until is not None and self.is_idle and self._sink is None:
            if now >= idle_until:
                self._close()
            else:
                self._deadline(idle_until)

    def _cancel_timers(self) -> None:
        self._head_by = self.idle_until = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

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
        return self._current is None and not self._queue and not self._in_head

    def close_idle(self) -> None:
        """Shutting down: no new request; an idle connection is closed now."""
        self._closing = True
        if self.is_idle and self._sink is None:
            self._close()

    async def shutdown(self, timeout: float | None) -> None:  # noqa: ASYNC109 (a grace, not a deadline)
        """Let the request running finish within ``timeout``; then cancel it and close."""
        self._closing = True
        task = self._task
        if task is not None and not task.done():
            await asyncio.wait([task], timeout=timeout)
            if not task.done():
                if self._current is not None:
                    self._current._cancel(asyncio.CancelledError())
                task.cancel()
                await asyncio.wait([task], timeout=timeout)
        self._close()

    def _close(self) -> None:
        self._cancel_timers()
        if self.transport is not None:
            self.transport.close()

    def _abort(self) -> None:
        self._closing = True
        self._cancel_timers()
        if self.transport is not None:
            self.transport.abort()

    def force_close(self) -> None:
        """Closed now, whatever it is doing (a connection closed to make room at the cap)."""
        self._closing = True
        self._close()


#: the bytes of a ``100 Continue`` (``proxy/edge/agent_body.py``): any response head is more
_CONTINUE = len(b"HTTP/1.1 100 Continue\r\n\r\n")

#: a request's task until it runs, and after (aiohttp's request holds one)
_NO_TASK: Any = None


async def _answered(response: web.StreamResponse) -> web.StreamResponse:
    return response
