"""mend's own agent-side server (``proxy/edge/server``): what it reads, bounds and answers.

A real mend in process on loopback, real upstreams (aiohttp, or raw asyncio where the test needs
to see exact bytes), and raw sockets on the agent side, since these are the behaviours an HTTP
client library hides (pipelining, silence, garbage, declined upgrades).
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from proxy.runtime.app import MendServer
from tests.conftest import Mend, StartMend, StartUpstream


async def _echo(request: web.Request) -> web.Response:
    return web.json_response({"path": request.path})


def _address(mend: Mend) -> tuple[str, int]:
    server = mend.client.server
    assert server.port is not None
    return server.host, server.port


async def _exchange(mend: Mend, data: bytes, *, wait: float = 5.0) -> bytes:
    """Send ``data`` on a new connection; everything mend sends until it closes (or ``wait``)."""
    reader, writer = await asyncio.open_connection(*_address(mend))
    writer.write(data)
    await writer.drain()
    out = b""
    try:
        async with asyncio.timeout(wait):
            while chunk := await reader.read(65536):
                out += chunk
    except TimeoutError:
        pass
    writer.close()
    return out


def _statuses(raw: bytes) -> list[int]:
    """The status of each response in ``raw`` (a body need not end with a line break)."""
    return [int(status) for status in re.findall(rb"HTTP/1\.[01] (\d{3}) ", raw)]


@pytest.fixture
async def raw_upstream() -> AsyncIterator[tuple[str, list[bytes]]]:
    """An upstream on raw asyncio that records each request's exact bytes (head and body, as
    ``Content-Length`` frames it) and answers with the body's SHA-256."""
    seen: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        body = await reader.readexactly(length)
        seen.append(head + body)
        answer = json.dumps({"sha256": hashlib.sha256(body).hexdigest()}).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(answer)).encode()
            + b"\r\n\r\n"
            + answer
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        server.close()


async def test_a_compressed_request_body_reaches_the_upstream_as_sent(
    start_mend: StartMend, raw_upstream: tuple[str, list[bytes]]
) -> None:
    """A gzip body with ``Content-Encoding: gzip`` is forwarded byte for byte (aiohttp's server
    inflated it and forwarded the old length: the upstream waited for bytes that never came)."""
    url, seen = raw_upstream
    mend = await start_mend(url)
    body = gzip.compress(json.dumps({"query": "a compressed agent body"}).encode())
    headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
    async with mend.client.post("/items", data=body, headers=headers) as response:
        assert response.status == 200
        answer: dict[str, Any] = await response.json()
    assert answer["sha256"] == hashlib.sha256(body).hexdigest()
    assert b"content-encoding: gzip" in seen[0].lower()


async def test_a_connection_that_sends_nothing_is_closed_at_the_keepalive_timeout(
    start_mend: StartMend, start_upstream: StartUpstream
) -> None:
    """A connection opened and left silent is closed like an idle keep-alive one (aiohttp's
    server kept it open for ever: a slot taken at no cost to the client)."""
    mend = await start_mend(await start_upstream({"/": _echo}), keepalive_timeout=0.3)
    reader, writer = await asyncio.open_connection(*_address(mend))
    async with asyncio.timeout(5):
        assert await reader.read() == b""
    writer.close()


async def test_pipelined_requests_are_answered_in_order(
    start_mend: StartMend, start_upstream: StartUpstream
) -> None:
    """Requests sent back to back on one connection get their responses in the same order."""
    mend = await start_mend(await start_upstream({"/{name}": _echo}))
    raw = await _exchange(
        mend,
        b"GET /first HTTP/1.1\r\nHost: a\r\n\r\n"
        b"GET /second HTTP/1.1\r\nHost: a\r\n\r\n"
        b"GET /third HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    )
    assert _statuses(raw) == [200, 200, 200]
    assert raw.index(b"/first") < raw.index(b"/second") < raw.index(b"/third")


async def test_garbage_behind_a_good_request_gets_its_envelope_after_the_answer(
    start_mend: StartMend, start_upstream: StartUpstream
) -> None:
    """The good request is answered first; then the bytes that are not HTTP get a 400 envelope
    and the connection closes."""
    mend = await start_mend(await start_upstream({"/{name}": _echo}))
    raw = await _exchange(mend, b"GET /fine HTTP/1.1\r\nHost: a\r\n\r\nNOT HTTP AT ALL\r\n\r\n")
    assert _statuses(raw) == [200, 400]
    assert b'"code":"MALFORMED_REQUEST"' in raw.replace(b" ", b"")


async def test_a_declined_upgrade_leaves_the_connection_speaking_http(
    start_mend: StartMend, start_upstream: StartUpstream
) -> None:
    """An upgrade the upstream answers with a plain 200: the next request on the connection is
    read as HTTP and answered."""
    mend = await start_mend(await start_upstream({"/{name}": _echo}))
    reader, writer = await asyncio.open_connection(*_address(mend))
    writer.write(
        b"GET /upgrade HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    async with asyncio.timeout(5):
        first = await reader.readuntil(b'"}')
        writer.write(b"GET /after HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        second = await reader.read()
    writer.close()
    assert _statuses(first) == [200]
    assert _statuses(second) == [200]
    assert b"/after" in second


async def test_a_head_bigger_than_its_cap_is_refused_while_it_arrives(
    start_mend: StartMend, start_upstream: StartUpstream
) -> None:
    """One header value growing past the whole-head cap is a 431 before it ends: llhttp hands a
    field over only once it is whole, so the cap on the head's bytes is what bounds it."""
    mend = await start_mend(
        await start_upstream({"/": _echo}), max_request_line=1024, max_header_size=1024
    )
    reader, writer = await asyncio.open_connection(*_address(mend))
    writer.write(b"GET / HTTP/1.1\r\nHost: a\r\nX-Big: ")
    async with asyncio.timeout(5):
        for _ in range(8):  # 8 KiB, the header never finished
            writer.write(b"x" * 1024)
            await writer.drain()
        raw = await reader.read()
    writer.close()
    assert _statuses(raw) == [431]


async def test_a_handler_bug_is_an_envelope_not_a_traceback(
    start_mend: StartMend, start_upstream: StartUpstream
) -> None:
    """A request whose handling raises inside mend gets mend's 500 envelope, and the log says
    which exception it was."""
    mend = await start_mend(await start_upstream({"/": _echo}))
    server = mend.client.server
    assert hasattr(server, "mend")

    async def broken(_: web.BaseRequest) -> web.StreamResponse:
        raise LookupError("a bug")

    server.mend.handler = broken
    async with mend.client.get("/") as response:
        assert response.status == 500
        body = await response.json()
    assert body["error"]["code"] == "PROXY_INTERNAL_ERROR"
    assert "LookupError" in mend.log.getvalue()


async def test_an_agent_hanging_up_mid_body_is_a_499_not_the_upstreams_502(
    start_mend: StartMend, start_upstream: StartUpstream
) -> None:
    """The agent closes after part of its body: the log says ``client_closed`` (nginx's 499),
    not an upstream failure, and no 502 is counted against the upstream."""

    async def reads_all(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({})

    mend = await start_mend(await start_upstream({"POST /upload": reads_all}))
    _, writer = await asyncio.open_connection(*_address(mend))
    writer.write(b"POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n" + b"x" * 10)
    await writer.drain()
    await asyncio.sleep(0.2)  # the request is on its way upstream
    writer.close()
    lines: list[dict[str, Any]] = []
    for _ in range(100):  # the log line is written once mend has noticed (5 s at most)
        lines = [line for line in mend.log_lines() if line.get("path") == "/upload"]
        if lines:
            break
        await asyncio.sleep(0.05)
    (line,) = lines
    assert (line["status"], line["outcome"]) == (499, "client_closed")


async def test_the_connection_settings_reach_the_server(
    start_mend: StartMend, start_upstream: StartUpstream
) -> None:
    """Every agent-connection setting is the server's limit (``send_timeout`` new with it)."""
    mend = await start_mend(
        await start_upstream({"/": _echo}),
        send_timeout=7.5,
        keepalive_timeout=9.0,
        client_header_timeout=8.0,
        max_request_line=2048,
        max_header_size=4096,
        max_headers=20,
    )
    server = getattr(mend.client.server, "mend", None)  # the MendServer under the test server
    assert isinstance(server, MendServer)
    limits = server.limits
    assert (limits.send_timeout, limits.keepalive_timeout, limits.header_timeout) == (7.5, 9.0, 8.0)
    assert (limits.max_line, limits.max_field, limits.max_headers) == (2048, 4096, 20)


async def test_a_half_close_while_the_request_runs_is_the_agent_leaving(
    start_mend: StartMend, start_upstream: StartUpstream
) -> None:
    """An agent that shuts down its sending side while its request is upstream is gone, as
    nginx reads a FIN (``proxy_ignore_client_abort off``): a 499 ``client_closed``."""

    async def slow(_: web.Request) -> web.Response:
        await asyncio.sleep(0.5)
        return web.json_response({})

    mend = await start_mend(await start_upstream({"/slow": slow}))
    reader, writer = await asyncio.open_connection(*_address(mend))
    writer.write(b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
    writer.write_eof()
    async with asyncio.timeout(5):
        assert await reader.read() == b""
    writer.close()
    lines: list[dict[str, Any]] = []
    for _ in range(100):  # the log line is written once the upstream answered (5 s at most)
        lines = [line for line in mend.log_lines() if line.get("path") == "/slow"]
        if lines:
            break
        await asyncio.sleep(0.05)
    (line,) = lines
    assert (line["status"], line["outcome"]) == (499, "client_closed")
