"""mend's upstream client (``proxy/edge/upstream``) against real servers on loopback: aiohttp
apps for well-behaved ones, raw asyncio servers for what a misbehaving upstream sends."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from multidict import CIMultiDict

from proxy.edge.upstream import (
    ConnectError,
    Disconnected,
    Limits,
    Pool,
    ProtocolError,
    ReadTimeout,
    Response,
    Timeouts,
)

TIMEOUTS = Timeouts(connect=1.0, read=1.0)
Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Raw:
    """A TCP server running ``serve`` on each connection; counts connections and request heads
    (``read_head`` is what ``serve`` calls to read one)."""

    def __init__(self, serve: Serve) -> None:
        self.serve = serve
        self.connections = 0
        self.heads: list[bytes] = []
        self.server: asyncio.Server | None = None

    @classmethod
    def answering(cls, answer: bytes) -> Raw:
        """A server that answers each connection's first request with ``answer``, then waits
        for the client to close."""

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await raw.read_head(reader)
            writer.write(answer)
            await writer.drain()
            await reader.read()

        raw = cls(serve)
        return raw

    async def read_head(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head)
        return head

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        with contextlib.suppress(Exception):
            await self.serve(reader, writer)
        with contextlib.suppress(Exception):
            writer.close()

    async def __aenter__(self) -> Pool:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return Pool("127.0.0.1", port, host_header=f"127.0.0.1:{port}", limits=Limits())

    async def __aexit__(self, *_: object) -> None:
        assert self.server is not None
        self.server.close()


@contextlib.asynccontextmanager
async def app_pool(app: web.Application) -> AsyncIterator[Pool]:
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    assert server.port is not None
    pool = Pool("127.0.0.1", server.port, host_header=f"127.0.0.1:{server.port}")
    try:
        yield pool
    finally:
        await pool.close()
        await server.close()


async def get(pool: Pool, target: str = "/", method: str = "GET", **kw: object) -> Response:
    headers = kw.pop("headers", None) or CIMultiDict(Host="upstream")
    assert isinstance(headers, CIMultiDict)
    body = kw.pop("body", None)
    timeouts = kw.pop("timeouts", TIMEOUTS)
    assert isinstance(timeouts, Timeouts)
    async with asyncio.timeout(5):
        return await pool.request(method, target, headers, body, timeouts)  # type: ignore[arg-type]


async def whole(response: Response) -> bytes:
    out = bytearray()
    async with asyncio.timeout(5):
        while chunk := await response.read():
            out += chunk
    response.release()
    return bytes(out)


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


# --- well-behaved upstreams -----------------------------------------------------------------


async def test_a_response_arrives_with_its_status_headers_and_body() -> None:
    """Status, reason, headers (a CIMultiDictProxy, raw bytes kept) and the body come through."""

    async def ok(_: web.Request) -> web.Response:
        return web.json_response({"ok": True}, headers={"X-Thing": "1"}, reason="Fine")

    app = web.Application()
    app.router.add_get("/ok", ok)
    async with app_pool(app) as pool:
        response = await get(pool, "/ok")
        assert (response.status, response.reason) == (200, "Fine")
        assert response.headers["x-thing"] == "1"
        assert (b"X-Thing", b"1") in response.raw_headers
        assert response.content_type == "application/json"
        assert response.charset == "utf-8"
        assert await whole(response) == b'{"ok": true}'


async def test_keep_alive_reuses_one_connection_for_many_requests() -> None:
    """Ten requests, each read to its end, go over one connection."""
    transports: set[object] = set()

    async def ok(request: web.Request) -> web.Response:
        transports.add(request.transport)
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/", ok)
    async with app_pool(app) as pool:
        for _ in range(10):
            assert await whole(await get(pool)) == b"ok"
    assert len(transports) == 1


async def test_a_response_not_read_to_its_end_closes_its_connection() -> None:
    """A response released before its body arrived whole is not reused: the next request opens
    a new connection."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = not raw.heads
        await raw.read_head(reader)
        body = b"01234" if first else b"0123456789"
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n" + body)
        await writer.drain()
        await reader.read()

    raw = Raw(serve)
    async with raw as pool:
        response = await get(pool)
        response.release()
        assert await whole(await get(pool)) == b"0123456789"
    assert raw.connections == 2


async def test_connection_close_is_not_reused() -> None:
    """A response saying ``Connection: close`` ends its connection's use."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await raw.read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()

    raw = Raw(serve)
    async with raw as pool:
        assert await whole(await get(pool)) == b"ok"
        assert await whole(await get(pool)) == b"ok"
    assert raw.connections == 2


async def test_close_delimited_body_ends_at_the_close() -> None:
    """A body with neither length nor chunks ends when the upstream closes."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await raw.read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n\r\nfirst ")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"second")
        await writer.drain()

    raw = Raw(serve)
    async with raw as pool:
        response = await get(pool)
        assert response.content_length is None
        assert await whole(response) == b"first second"


async def test_chunked_body_with_extensions_and_trailers() -> None:
    """Chunk extensions are skipped, trailers are not taken for headers, the body is whole."""

    raw = Raw.answering(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;name=value\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"
    )
    async with raw as pool:
        response = await get(pool)
        assert await whole(response) == b"hello world"
        assert "X-Trailer" not in response.headers


@pytest.mark.parametrize("status", [204, 304])
async def test_no_body_for_204_and_304(status: int) -> None:
    """204 and 304 end at their head, whatever length they announce; the connection is reused."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await raw.read_head(reader)
            writer.write(f"HTTP/1.1 {status} X\r\nETag: 1\r\n\r\n".encode())
            await writer.drain()

    raw = Raw(serve)
    async with raw as pool:
        assert await whole(await get(pool)) == b""
        assert await whole(await get(pool)) == b""
    assert raw.connections == 1


async def test_head_response_has_no_body() -> None:
    """A HEAD response's Content-Length announces a body that never comes: none is waited for."""

    raw = Raw.answering(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
    async with raw as pool:
        response = await get(pool, method="HEAD")
        assert response.content_length == 1000
        assert await whole(response) == b""


async def test_interim_responses_are_skipped() -> None:
    """100 and 103 before the final head are skipped; their headers are not the response's."""

    raw = Raw.answering(
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
        + b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    )
    async with raw as pool:
        response = await get(pool)
        assert response.status == 200
        assert "Link" not in response.headers
        assert await whole(response) == b"ok"


async def test_upgrade_hands_over_the_bytes_after_the_101() -> None:
    """A 101 leaves the connection upgraded, with what followed its head kept for the tunnel."""

    raw = Raw.answering(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\n\r\n\x81\x02hi"
    )
    async with raw as pool:
        response = await get(pool)
        assert response.status == 101
        assert response.connection.upgraded
        got: list[bytes] = []

        class Sink:
            def feed_data(self, data: bytes) -> None:
                got.append(data)

            def feed_eof(self) -> None:
                got.append(b"EOF")

        response.connection.relay_to(Sink())
        assert got[0] == b"\x81\x02hi"
        response.close()


# --- what goes out ----------------------------------------------------------------------------


async def test_request_head_is_written_as_given() -> None:
    """Header names keep their case and order, a non-UTF-8 byte passes as sent, ``Expect`` is
    dropped, a bodiless POST says ``Content-Length: 0``, and nothing is added."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await raw.read_head(reader)
        writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        await writer.drain()

    raw = Raw(serve)
    headers = CIMultiDict(
        [("Host", "api"), ("x-lower", "a"), ("X-Name", "caf\udce9"), ("Expect", "100-continue")]
    )
    headers.add("X-Lower", "b")
    async with raw as pool:
        await whole(await get(pool, "/p?q=1", method="POST", headers=headers))
    assert raw.heads == [
        b"POST /p?q=1 HTTP/1.1\r\nHost: api\r\nx-lower: a\r\nX-Name: caf\xe9\r\n"
        b"X-Lower: b\r\nContent-Length: 0\r\n\r\n"
    ]


async def test_a_header_with_a_line_break_is_not_sent() -> None:
    """A value carrying CR LF (header injection) fails before anything is written."""
    raw = Raw(lambda reader, writer: raw.read_head(reader))  # type: ignore[arg-type, return-value]
    async with raw as pool:
        with pytest.raises(ProtocolError):
            await get(pool, headers=CIMultiDict(Host="x", X="a\r\nInjected: 1"))
    assert raw.heads == []


async def test_a_body_of_unknown_length_streams_chunked() -> None:
    """An async iterator's chunks go out as they come, chunked, and arrive whole."""
    seen: list[bytes] = []

    async def echo(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Transfer-Encoding", "").encode())
        return web.Response(body=await request.read())

    async def parts() -> AsyncIterator[bytes]:
        for part in (b"one ", b"", b"two ", b"three"):
            yield part
            await asyncio.sleep(0)

    app = web.Application()
    app.router.add_post("/", echo)
    async with app_pool(app) as pool:
        response = await get(pool, method="POST", body=parts())
        assert await whole(response) == b"one two three"
    assert seen == [b"chunked"]


async def test_a_body_with_its_length_goes_unchunked() -> None:
    """With ``Content-Length`` given, the body's bytes go as they are."""

    async def echo(request: web.Request) -> web.Response:
        assert "Transfer-Encoding" not in request.headers
        return web.Response(body=await request.read())

    async def parts() -> AsyncIterator[bytes]:
        yield b"x" * 300_000
        yield b"y" * 300_000

    app = web.Application()
    app.router.add_put("/", echo)
    async with app_pool(app) as pool:
        headers = CIMultiDict([("Host", "h"), ("Content-Length", "600000")])
        body = await whole(await get(pool, method="PUT", headers=headers, body=parts()))
    assert body == b"x" * 300_000 + b"y" * 300_000


async def test_an_answer_before_the_body_was_sent_is_not_reused() -> None:
    """An upstream that answers before it has the whole body may read the rest as its next
    request: that connection is closed, and the next request opens a new one."""
    more = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await raw.read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await asyncio.sleep(0.2)  # the answer is in before the rest of the body goes
        more.set()
        while True:  # (a connection used again would be answered here)
            await raw.read_head(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()

    async def slow() -> AsyncIterator[bytes]:
        yield b"x"
        await more.wait()
        yield b"y"

    raw = Raw(serve)
    async with raw as pool:
        headers = CIMultiDict([("Host", "h"), ("Content-Length", "2")])
        response = await get(pool, method="POST", headers=headers, body=slow())
        await more.wait()
        await asyncio.sleep(0.05)  # the body is all sent by the time the answer is released
        assert await whole(response) == b"ok"
        assert await whole(await get(pool)) == b"ok"
    assert raw.connections == 2


async def test_a_declined_upgrade_is_not_reused() -> None:
    """A request that asked an upgrade the upstream answered without a 101 leaves its
    connection in doubt (an origin may already speak the new protocol): it is closed."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await raw.read_head(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()

    raw = Raw(serve)
    async with raw as pool:
        upgrade = CIMultiDict([("Host", "h"), ("Upgrade", "websocket"), ("Connection", "Upgrade")])
        assert await whole(await get(pool, headers=upgrade)) == b"ok"
        assert await whole(await get(pool)) == b"ok"
        assert await whole(await get(pool)) == b"ok"
    assert raw.connections == 2


async def test_a_length_written_with_whitespace_or_zeros_goes_in_its_canonical_form() -> None:
    """``Content-Length: 003 <TAB>`` (llhttp reads 3) goes upstream as ``Content-Length: 3``."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await raw.read_head(reader)
        await reader.readexactly(3)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()

    async def body() -> AsyncIterator[bytes]:
        yield b"abc"

    raw = Raw(serve)
    async with raw as pool:
        headers = CIMultiDict([("Host", "h"), ("Content-Length", "003 \t")])
        assert await whole(await get(pool, method="POST", headers=headers, body=body())) == b"ok"
    assert b"\r\nContent-Length: 3\r\n" in raw.heads[0]


# --- misbehaving upstreams --------------------------------------------------------------------


async def test_reset_before_the_head_fails_once() -> None:
    """A reset after reading the request: ``Disconnected``, and the request was sent once."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await raw.read_head(reader)
        _reset(writer)

    raw = Raw(serve)
    async with raw as pool:
        with pytest.raises(Disconnected):
            await get(pool)
        await asyncio.sleep(0.1)
    assert (raw.connections, len(raw.heads)) == (1, 1)


async def test_reset_after_the_head_fails_the_body() -> None:
    """A reset in the middle of a body with a length: the body read raises ``Disconnected``."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await raw.read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
        await writer.drain()
        await asyncio.sleep(0.05)
        _reset(writer)

    raw = Raw(serve)
    async with raw as pool:
        response = await get(pool)
        assert response.status == 200
        with pytest.raises(Disconnected):
            await whole(response)


async def test_a_dead_pooled_connection_is_not_sent_again() -> None:
    """The upstream reads a second request on a kept-alive connection and closes it without an
    answer: that request fails; no new connection carries it again."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await raw.read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await raw.read_head(reader)
        _reset(writer)

    raw = Raw(serve)
    async with raw as pool:
        assert await whole(await get(pool)) == b"ok"
        with pytest.raises(Disconnected):
            await get(pool)
        await asyncio.sleep(0.1)
    assert (raw.connections, len(raw.heads)) == (1, 2)


async def test_garbage_status_line_is_a_protocol_error() -> None:
    """Bytes that are not an HTTP response: ``ProtocolError``."""

    raw = Raw.answering(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
    async with raw as pool:
        with pytest.raises(ProtocolError):
            await get(pool)


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 9000 + b"\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n" + b"X-Many: 1\r\n" * 129 + b"\r\n",
        b"HTTP/1.1 200 " + b"O" * 9000 + b"\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-Endless: " + b"a" * 2_000_000,
    ],
    ids=["long-field", "many-fields", "long-status", "endless-head"],
)
async def test_a_head_over_the_limits_is_a_protocol_error(head: bytes) -> None:
    """A field over 8190 bytes, more than 128 fields, a long status line, a head that never
    ends: refused with ``ProtocolError`` (aiohttp's client limits)."""

    raw = Raw.answering(head)
    async with raw as pool:
        with pytest.raises(ProtocolError):
            await get(pool)


async def test_too_many_interim_responses_is_a_protocol_error() -> None:
    """Past ``max_interim`` interim responses the response fails, the rest unparsed."""

    raw = Raw.answering(b"HTTP/1.1 103 Early Hints\r\n\r\n" * 10_000)
    async with raw as pool:
        with pytest.raises(ProtocolError, match="interim"):
            await get(pool)


async def test_no_head_in_time_is_a_read_timeout() -> None:
    """An upstream that reads the request and never answers: ``ReadTimeout`` after
    ``read`` seconds."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await raw.read_head(reader)
        await reader.read()

    raw = Raw(serve)
    async with raw as pool:
        with pytest.raises(ReadTimeout):
            await get(pool, timeouts=Timeouts(connect=1, read=0.2))


async def test_a_slow_body_times_out_between_bytes() -> None:
    """A body pausing longer than the read timeout fails with ``ReadTimeout``; one pausing
    less than the idle timeout set for streaming does not."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await raw.read_head(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab")
            await writer.drain()
            await asyncio.sleep(0.4)
            writer.write(b"cd")
            await writer.drain()

    raw = Raw(serve)
    async with raw as pool:
        response = await get(pool, timeouts=Timeouts(connect=1, read=0.2))
        with pytest.raises(ReadTimeout):
            await whole(response)
        response = await get(pool, timeouts=Timeouts(connect=1, read=0.2))
        response.idle(2.0)
        assert await whole(response) == b"abcd"


async def test_a_consumer_that_lags_pauses_the_socket() -> None:
    """Body bytes not read are held up to about the high-water mark; the rest waits in the
    kernel, and all of it arrives once read."""
    size = 8 << 20

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await raw.read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        writer.write(b"z" * size)
        await writer.drain()

    raw = Raw(serve)
    async with raw as pool:
        response = await get(pool)
        await asyncio.sleep(0.3)
        connection = response.connection
        assert connection.paused
        assert connection.buffered < Limits().high_water + (1 << 20)
        assert len(await whole(response)) == size


async def test_a_refused_connection_is_a_connect_error() -> None:
    """A port nobody listens on: ``ConnectError`` (nothing was sent)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        pool = Pool("127.0.0.1", port, host_header="x")
        with pytest.raises(ConnectError):
            await get(pool)
