"""One HTTP/1.1 connection to an upstream: an asyncio Protocol feeding llhttp (``httptools``).

One exchange at a time, never pipelined. The parser stays with the connection from one response
to the next, as llhttp resets itself after each message of a keep-alive connection. Nothing from
the upstream is trusted: a head has a size cap (status line, each field, the field count, the
whole head) and at most ``max_interim`` interim (1xx) responses before the final one; bytes that
arrive when no response is awaited close the connection; the body is held up to ``high_water``
bytes, past which the socket is not read until the consumer takes it (backpressure).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Protocol, cast

import httptools
from multidict import CIMultiDictProxy

from proxy.edge.rawhead import decoded
from proxy.edge.upstream.errors import Disconnected, ProtocolError, ReadTimeout, UpstreamError
from proxy.edge.upstream.limits import Limits


class Sink(Protocol):
    """Where an upgraded connection's bytes go (``proxy/edge/tunnel.py``'s relay)."""

    def feed_data(self, data: bytes) -> object: ...

    def feed_eof(self) -> None: ...


class _Extra(Exception):
    """Stops the parser: the response is whole, and what follows was not asked for."""


class Connection(asyncio.Protocol):
    """The connection and the exchange on it; ``Pool`` starts exchanges, ``Response`` reads them."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, limits: Limits, on_lost: Callable[[Connection], None]
    ) -> None:
        self.loop, self.limits, self.on_lost = loop, limits, on_lost
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.lost = False
        self.idle_since = 0.0
        self.writing_paused = False
        self._drain: asyncio.Future[None] | None = None
        self.relay: Sink | None = None
        #: the exchange's: the final head is in (``None``: no exchange, bytes are not expected)
        self.head: asyncio.Future[None] | None = None
        self.begin("", None, upgrade=False)
        self.head = None  # no exchange yet

    # --- the exchange -------------------------------------------------------------------------

    def begin(self, method: str, on_interim: Callable[[], None] | None, *, upgrade: bool) -> None:
        """A new request is about to go out on this connection (``upgrade``: it asks one)."""
        self.method = method
        self.asked_upgrade = upgrade
        #: the final head came before the request was all sent: the upstream may not have read
        #: the rest, and where its next request would start is in doubt
        self.answered_early = False
        self.on_interim = on_interim
        self.head = self.loop.create_future()
        self.status, self.reason, self.version = 0, b"", "1.1"
        self.raw: list[tuple[bytes, bytes]] = []
        self.head_size = self.interim = 0
        self.in_interim = self.head_done = self.body_done = self.request_done = False
        self.keep_alive = False
        self.buffer: deque[bytes] = deque()
        self.buffered = 0
        self.paused = False
        self.error: UpstreamError | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.read_timeout: float | None = None
        self.tail = b""
        self.upgraded = False

    def headers(self) -> CIMultiDictProxy[str]:
        return decoded(self.raw)

    def _delimited(self) -> bool:
        """Whether the body's end is told by ``Content-Length`` or chunks (else by the close);
        asked only when the connection closes mid-body."""
        for name, value in self.raw:
            lowered = name.lower()
            if lowered == b"content-length":
                return True
            if lowered == b"transfer-encoding" and b"chunked" in value.lower():
                return True
        return False

    @property
    def reusable(self) -> bool:
        """Whether another request may go on this connection: both messages whole, the
        upstream keeping it open, nothing failed, and no doubt where the next request would
        start: not after a declined upgrade, nor after an answer that came before the request
        was all sent (an upstream that answers before reading a body may read it as the next
        request)."""
        return (
            self.keep_alive
            and self.body_done
            and self.request_done
            and not self.answered_early
            and not self.asked_upgrade
            and self.error is None
            and not self.lost
            and self.transport is not None
            and not self.transport.is_closing()
        )

    def fail(self, error: UpstreamError) -> None:
        """The exchange failed: whoever waits hears it, and the connection is aborted."""
        if self.error is None:
            self.error = error
        self.keep_alive = False
        if self.head is not None and not self.head.done():
            self.head.set_exception(error)
        self._wake(error)
        if self._drain is not None and not self._drain.done():
            self._drain.set_exception(error)
        if self.transport is not None:
            self.transport.abort()

    def _wake(self, error: BaseException | None = None) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)

    # --- writing --------------------------------------------------------------------------------

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)

    def pause_reading(self) -> None:
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None:
            self.transport.resume_reading()

    async def drain(self, within: float | None = None) -> None:
        """Until the transport's write buffer is below its mark; ``ReadTimeout`` when the
        upstream takes nothing for ``within`` seconds."""
        if self.lost:
            raise self.error or Disconnected("connection closed while the request was sent")
        if not self.writing_paused:
            return
        self._drain = drain = self.loop.create_future()
        try:
            async with asyncio.timeout(within):
                await drain
        except TimeoutError:
            raise ReadTimeout(f"the upstream read nothing of the request for {within} s") from None
        finally:
            self._drain = None

    # --- asyncio.Protocol -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.transport = None
        if self.relay is not None:
            self.relay.feed_eof()
        elif self.head is not None and self.error is None and not self.body_done:
            error: UpstreamError | None = None
            if not self.head_done:
                error = Disconnected("closed before the response head")
            elif self.upgraded:
                pass  # the tunnel hears of it when it takes over (``relay_to``)
            elif exc is None and not self._delimited():
                self.body_done = True  # a body delimited by the close: whole now
                self.keep_alive = False
                self._wake()
            else:
                error = Disconnected("closed before the response body ended")
            if error is not None:
                error.__cause__ = exc
                self.fail(error)
        if self._drain is not None and not self._drain.done():
            self._drain.set_exception(Disconnected("closed while the request was sent"))
        self.on_lost(self)

    def data_received(self, data: bytes) -> None:
        if self.relay is not None:
            self.relay.feed_data(data)
        elif self.upgraded:  # read before the tunnel took over (reading is paused by now)
            self.tail += data
        elif self.head is None or self.body_done or self.error is not None:
            self.keep_alive = False  # bytes nobody asked for: this connection is done
            if self.transport is not None:
                self.transport.abort()
        elif self.head_done or self._head_fits(len(data)):
            self._parse(data)

    def _head_fits(self, size: int) -> bool:
        """Whether the heads read so far, ``size`` more bytes included, are within the cap."""
        self.head_size += size
        if self.head_size <= self.limits.max_head:
            return True
        self.fail(ProtocolError(f"response head over {self.limits.max_head} bytes"))
        return False

    def _parse(self, data: bytes) -> None:
        """``data`` through llhttp; what it refuses, as the request's failure."""
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as exc:
            self._upgrade(data[exc.args[0] :])
        except httptools.HttpParserCallbackError as exc:
            error = exc.__context__
            if isinstance(error, _Extra):
                if self.transport is not None:
                    self.transport.abort()  # the response is whole; what followed is not read
            elif isinstance(error, UpstreamError):
                self.fail(error)
            else:
                self.fail(ProtocolError(f"malformed response: {error}"))
        except httptools.HttpParserError as exc:
            self._refused(exc)

    def _refused(self, exc: httptools.HttpParserError) -> None:
        if self.head_done and self.status == 101:
            # a 101 without Upgrade: llhttp stops at it all the same; the tunnel refuses it
            self.keep_alive = False
            if self.transport is not None:
                self.transport.pause_reading()
        else:
            failure = ProtocolError(f"malformed response: {exc}")
            failure.__cause__ = exc
            self.fail(failure)

    def _upgrade(self, tail: bytes) -> None:
        self.upgraded = True
        self.tail = tail
        if self.transport is not None:
            self.transport.pause_reading()  # until the tunnel relays (``relay_to``)

    def relay_to(self, sink: Sink) -> None:
        """From now on every byte read goes to ``sink``, those read after the 101 first."""
        self.relay = sink
        tail, self.tail = self.tail, b""
        if tail:
            sink.feed_data(tail)
        if self.transport is None:
            sink.feed_eof()
        else:
            self.transport.resume_reading()

    # --- httptools callbacks --------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.body_done:
            self.keep_alive = False
            raise _Extra

    def on_status(self, status: bytes) -> None:
        self.reason += status
        if len(self.reason) > self.limits.max_line_size:
            raise ProtocolError(f"status line over {self.limits.max_line_size} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        largest = self.limits.max_field_size
        if len(value) > largest or len(name) > largest:
            raise ProtocolError(f"header field over {largest} bytes")
        if not self.head_done:  # after it, a trailer: checked, not kept (aiohttp kept none)
            raw = self.raw
            if len(raw) >= self.limits.max_headers:
                raise ProtocolError(f"more than {self.limits.max_headers} header fields")
            raw.append((name, value))

    def on_headers_complete(self) -> None:
        parser = self.parser
        status = parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            self.interim += 1
            if self.interim > self.limits.max_interim:
                raise ProtocolError(f"more than {self.limits.max_interim} interim (1xx) responses")
            self.in_interim = True
            self.raw, self.reason = [], b""
            if self.interim == 1 and self.on_interim is not None:
                self.on_interim()
            return
        self.status = status
        self.version = parser.get_http_version()
        self.head_done = True
        self.answered_early = not self.request_done
        assert self.head is not None
        if not self.head.done():
            self.head.set_result(None)
        if self.method == "HEAD":
            # llhttp cannot be told a HEAD response has no body: it would wait for Content-Length
            # bytes; the parser stops here, and the connection is not reused
            self.body_done = True
            raise _Extra

    def on_body(self, body: bytes) -> None:
        self.buffer.append(body)
        self.buffered += len(body)
        if self.buffered > self.limits.high_water and not self.paused and self.transport:
            self.paused = True
            self.transport.pause_reading()
        if self.waiter is not None:
            self._wake()

    def on_message_complete(self) -> None:
        if self.in_interim:
            self.in_interim = False
            return
        self.body_done = True
        self.keep_alive = self.parser.should_keep_alive()
        self._wake()
