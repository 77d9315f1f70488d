"""Attacks on mend's own agent-side server (``proxy/edge/server``) from raw sockets.

A real mend (a process, or in process where the test needs a small connection cap) in front of
a raw asyncio upstream that records the exact bytes it was sent: what an agent's bytes become
upstream is the point of most of these. Each test is one behaviour that was broken.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import pytest
from aiohttp import web

from proxy.runtime.app import MendServer
from tests.conftest import Mend, StartMend, StartUpstream
from tests.hostile.procs import (
    MendProcess,
    body_of,
    mend_process,
    raw_exchange,
    raw_server,
    status_of,
)


class Upstream:
    """What a raw upstream received: each request's head and body, exactly as sent."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length, chunked = 0, False
            for line in head.lower().split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name == b"content-length":
                    length = int(value)
                elif name == b"transfer-encoding":
                    chunked = b"chunked" in value
            body = b""
            if chunked:
                while True:
                    size = await reader.readuntil(b"\r\n")
                    body += size + await reader.readexactly(int(size.split(b";")[0], 16) + 2)
                    if int(size.split(b";")[0], 16) == 0:
                        break
            else:
                body = await reader.readexactly(length)
            self.seen.append(head + body)
            answer = json.dumps({"received": len(body)}).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(answer), answer)
            )
            await writer.drain()


@contextmanager
def mend_before_raw(tmp_path: Path, **config: Any) -> Iterator[tuple[MendProcess, Upstream]]:
    upstream = Upstream()
    with raw_server(upstream.serve) as server:
        route = {"name": "api", "upstream": f"http://127.0.0.1:{server.port}"}
        with mend_process(tmp_path, {"routes": [route], **config}) as mend:
            yield mend, upstream


def _read_all(sock: socket.socket, wait: float) -> bytes:
    sock.settimeout(wait)
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except (TimeoutError, ConnectionError):
        pass
    return out


def test_a_body_still_arriving_at_sigterm_is_read_and_its_request_answered(
    tmp_path: Path,
) -> None:
    """SIGTERM while a request's body is on its way: the rest of the body is read and the
    request is answered within the grace (the server stopped reading the connection at
    shutdown, so the request waited for bytes it dropped until the grace ran out)."""
    with mend_before_raw(tmp_path, shutdown_timeout=8) as (mend, upstream):
        with socket.create_connection(("127.0.0.1", mend.port), timeout=10) as sock:
            sock.sendall(b"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n12345")
            time.sleep(0.5)  # the request is running, half its body read
            began = time.monotonic()
            mend.proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            sock.sendall(b"67890")
            raw = _read_all(sock, 10)
            took = time.monotonic() - began
        assert status_of(raw) == 200, raw[:200]
        assert body_of(raw) == {"received": 10}
        assert took < 5  # well inside the 8 s grace, not cut at its end
        assert upstream.seen[0].endswith(b"\r\n\r\n1234567890")


@pytest.mark.parametrize(
    "codings",
    [b"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked", b"Transfer-Encoding: gzip, chunked"],
    ids=["two-fields", "one-field"],
)
def test_a_transfer_coding_besides_chunked_is_refused_with_501_not_rewritten(
    tmp_path: Path, codings: bytes
) -> None:
    """``gzip`` then ``chunked`` (over one field or two): mend implements chunked alone, so it
    answers 501 as nginx does, and sends nothing upstream (it dropped the gzip coding and
    re-chunked the body: the origin took the coded bytes for the body itself)."""
    with mend_before_raw(tmp_path) as (mend, upstream):
        raw = raw_exchange(
            mend.port,
            b"POST /a HTTP/1.1\r\nHost: a\r\n%b\r\nConnection: close\r\n\r\n"
            b"5\r\nhello\r\n0\r\n\r\n" % codings,
        )
        time.sleep(0.3)
    assert status_of(raw) == 501
    assert body_of(raw)["error"]["code"] == "UNSUPPORTED_TRANSFER_CODING"
    assert upstream.seen == []


def test_a_transfer_encoding_not_ending_in_chunked_is_refused_before_it_is_forwarded(
    tmp_path: Path,
) -> None:
    """``Transfer-Encoding: xchunked`` leaves a request body's length unknown (RFC 9112 §6.3):
    a 400, and nothing upstream (llhttp said so only after the head was handed over: the
    request had already started and failed as the upstream's 502)."""
    with mend_before_raw(tmp_path) as (mend, upstream):
        raw = raw_exchange(
            mend.port,
            b"POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n"
            b"5\r\nhello\r\n0\r\n\r\n",
        )
        time.sleep(0.3)
    assert status_of(raw) == 400
    assert body_of(raw)["error"]["code"] == "MALFORMED_REQUEST"
    assert upstream.seen == []


def test_a_malformed_chunk_is_the_agents_400_not_the_upstreams_502(tmp_path: Path) -> None:
    """A chunk size that is not hex ends the request as the agent's malformed request (the
    body's failure read as a reset: mend answered, logged and counted the upstream's 502)."""
    with mend_before_raw(tmp_path) as (mend, upstream):
        raw = raw_exchange(
            mend.port,
            b"POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n5g\r\nworld\r\n0\r\n\r\n",
        )
        time.sleep(0.3)
        lines = [line for line in mend.log_lines() if line.get("event") == "request"]
    assert status_of(raw) == 400
    assert body_of(raw)["error"]["code"] == "MALFORMED_REQUEST"
    assert [line["status"] for line in lines] == [400]
    assert upstream.seen == []  # the body never completed upstream


async def _ok(request: web.Request) -> web.Response:
    return web.json_response({"path": request.path})


async def test_a_connection_reading_its_next_head_is_not_closed_to_make_room(
    start_mend: StartMend, start_upstream: StartUpstream
) -> None:
    """A pipelined head still arriving when the response before it ends: the connection is
    not idle, so a newcomer at the connection cap does not close it (its keep-alive deadline
    was set anyway, and the cap closed it mid-request as the longest idle)."""
    mend: Mend = await start_mend(await start_upstream({"/{name}": _ok}), max_connections=1)
    server = mend.client.server
    assert server.port is not None
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(b"GET /first HTTP/1.1\r\nHost: a\r\n\r\nGET /second HTTP/1.1\r\n")
    async with asyncio.timeout(5):
        first = await reader.readuntil(b'"/first"}')
    assert first.startswith(b"HTTP/1.1 200")
    await asyncio.sleep(0.1)
    _, other_writer = await asyncio.open_connection(server.host, server.port)
    await asyncio.sleep(0.2)  # accepted: room made, or not
    writer.write(b"Host: a\r\nConnection: close\r\n\r\n")
    async with asyncio.timeout(5):
        second = await reader.read()
    writer.close()
    other_writer.close()
    assert second.startswith(b"HTTP/1.1 200"), second[:200]
    assert b'"/second"' in second


async def test_requests_pipelined_in_one_read_are_not_all_queued(
    start_mend: StartMend, start_upstream: StartUpstream
) -> None:
    """Two thousand requests in one write behind a slow one: no more than about ``max_queued``
    wait parsed (the socket was paused only after a whole read was parsed, so every request in
    it was queued, a request object each: 16 times the bytes sent, per connection)."""

    async def slow(_: web.Request) -> web.Response:
        await asyncio.sleep(1.0)
        return web.json_response({"slow": True})

    mend = await start_mend(await start_upstream({"/slow": slow, "/{name}": _ok}))
    server = mend.client.server
    assert server.port is not None
    _, writer = await asyncio.open_connection(server.host, server.port)
    request = b"GET /fast HTTP/1.1\r\nHost: a\r\n\r\n"
    writer.write(b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n" + request * 2000)
    await writer.drain()
    await asyncio.sleep(0.5)  # the slow request runs; the rest is read, or not
    agents: MendServer = cast(Any, server).mend  # (conftest is imported twice, by two names)
    queued = [len(connection._queue) for connection in agents.connections]
    writer.close()
    assert queued
    assert max(queued) < 200, queued


async def test_pipelined_requests_held_while_the_queue_is_full_are_all_answered(
    start_mend: StartMend, start_upstream: StartUpstream
) -> None:
    """The requests read but held unparsed while the queue is full are answered, in order,
    even behind a request that takes longer than the header timeout (a head cut where mend
    stopped parsing is not the agent's slow head)."""
    hits: list[str] = []

    async def slow(_: web.Request) -> web.Response:
        await asyncio.sleep(1.5)
        return web.json_response({"slow": True})

    async def count(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.json_response({"n": len(hits)})

    mend = await start_mend(
        await start_upstream({"/slow": slow, "/{name}": count}), client_header_timeout=0.5
    )
    server = mend.client.server
    assert server.port is not None
    reader, writer = await asyncio.open_connection(server.host, server.port)
    requests = b"".join(b"GET /r%04d HTTP/1.1\r\nHost: a\r\n\r\n" % i for i in range(300))
    last = b"GET /last HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    writer.write(b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n" + requests + last)
    async with asyncio.timeout(20):
        raw = await reader.read(-1)
    writer.close()
    assert raw.count(b"HTTP/1.1 200 OK") == 302
    assert hits == [f"/r{i:04d}" for i in range(300)] + ["/last"]


def _masked_text(payload: bytes) -> bytes:
    """An agent's WebSocket text frame (RFC 6455 §5.2), masked, under 126 bytes."""
    key = b"\x01\x02\x03\x04"
    masked = bytes(byte ^ key[i % 4] for i, byte in enumerate(payload))
    return bytes([0x81, 0x80 | len(payload)]) + key + masked


async def test_bytes_behind_an_upgrade_pipelined_behind_a_request_go_to_the_tunnel(
    start_mend: StartMend, start_upstream: StartUpstream
) -> None:
    """A request, then a WebSocket upgrade and its first frame in the same write: the frame
    reaches the upstream's WebSocket (when the request ahead ended, the bytes held behind the
    upgrade were parsed as HTTP before the upgrade had even run, and the frame was lost)."""

    async def echo(request: web.Request) -> web.WebSocketResponse:
        socket_ = web.WebSocketResponse()
        await socket_.prepare(request)
        async for message in socket_:
            await socket_.send_str(message.data)
        return socket_

    mend = await start_mend(await start_upstream({"/ws": echo, "/{name}": _ok}))
    server = mend.client.server
    assert server.port is not None
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(
        b"GET /first HTTP/1.1\r\nHost: a\r\n\r\n"
        b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        + _masked_text(b"hello")
    )
    try:
        async with asyncio.timeout(5):
            first = await reader.readuntil(b'"/first"}')
            switched = await reader.readuntil(b"\r\n\r\n")
            echoed = await reader.readexactly(7)
    finally:
        writer.close()
    assert first.startswith(b"HTTP/1.1 200")
    assert switched.startswith(b"HTTP/1.1 101")
    assert echoed == b"\x81\x05hello"


def test_an_agent_still_sending_a_body_over_the_limit_reads_the_413_on_a_closing_connection(
    tmp_path: Path,
) -> None:
    """A body over ``request_body_max_bytes`` on a ``Connection: close`` request, the agent
    still sending: mend reads and drops the rest before closing, so the agent's sends succeed
    and it reads the 413 (mend closed with the body unread: the socket reset and the agent's
    send failed with ECONNRESET mid-body)."""
    with (
        mend_before_raw(tmp_path, request_body_max_bytes=100_000) as (mend, upstream),
        socket.create_connection(("127.0.0.1", mend.port), timeout=10) as sock,
    ):
        sock.sendall(
            b"POST /a HTTP/1.1\r\nHost: a\r\nConnection: close\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        chunk = b"4000\r\n" + b"x" * 0x4000 + b"\r\n"
        for _ in range(256):  # 4 MiB, forty times the limit
            sock.sendall(chunk)
        sock.sendall(b"0\r\n\r\n")
        raw = _read_all(sock, 5)
    assert status_of(raw) == 413
    assert body_of(raw)["error"]["code"] == "REQUEST_TOO_LARGE"
    assert upstream.seen == []


async def test_a_handler_that_fails_mid_response_does_not_start_a_second_one(
    start_mend: StartMend, start_upstream: StartUpstream
) -> None:
    """A handler bug after its response began: the connection is cut, the agent sees a
    truncated response (mend wrote its 500 envelope's head into the middle of the first
    response's body, which an agent reads as body bytes, or as the next response)."""
    mend = await start_mend(await start_upstream({"/": _ok}))
    server = mend.client.server

    async def broken(request: web.BaseRequest) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Length": "100"})
        await response.prepare(request)
        await response.write(b"partial")
        raise LookupError("a bug mid-response")

    cast(Any, server).mend.handler = broken
    assert server.port is not None
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
    async with asyncio.timeout(5):
        raw = await reader.read(-1)
    writer.close()
    assert raw.startswith(b"HTTP/1.1 200")
    assert raw.count(b"HTTP/1.1") == 1, raw
    assert raw.endswith(b"partial")
    assert "LookupError" in mend.log.getvalue()


async def test_an_agent_that_stops_reading_its_response_is_disconnected(
    start_mend: StartMend, start_upstream: StartUpstream
) -> None:
    """A slow-read agent: it asks for a large response and reads none of it. Once the
    response has waited ``send_timeout`` for it, the connection is aborted (nothing bounded
    the wait: the connection and the upstream exchange behind it were held for ever)."""

    async def big(_: web.Request) -> web.Response:
        return web.Response(body=b"x" * (32 << 20))

    mend = await start_mend(await start_upstream({"/big": big}))
    server = mend.client.server
    agents: MendServer = cast(Any, server).mend
    agents.limits = dataclasses.replace(agents.limits, send_timeout=0.5)
    assert server.port is not None
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (server.host, server.port))
    try:
        await asyncio.get_running_loop().sock_sendall(sock, b"GET /big HTTP/1.1\r\nHost: a\r\n\r\n")
        async with asyncio.timeout(10):
            while not agents.connections:  # noqa: ASYNC110
                await asyncio.sleep(0.05)  # accepted
            opened = time.monotonic()
            while agents.connections:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
    finally:
        sock.close()
    assert time.monotonic() - opened >= 0.4  # not before the send timeout
    assert agents.connections == {}


def test_a_request_line_of_another_http_version_is_refused(tmp_path: Path) -> None:
    """``HTTP/2.0`` and HTTP/0.9's bare request line are not HTTP/1: a 400, nothing forwarded
    (llhttp reads both; mend forwarded them and answered ``HTTP/2.0 200 OK`` and
    ``HTTP/0.9 200 OK`` status lines with HTTP/1.1 headers)."""
    with mend_before_raw(tmp_path) as (mend, upstream):
        second = raw_exchange(mend.port, b"GET /a HTTP/2.0\r\nHost: a\r\n\r\n")
        ninth = raw_exchange(mend.port, b"GET /a\r\n\r\n")
        time.sleep(0.3)
    assert status_of(second) == 400
    assert status_of(ninth) == 400
    assert upstream.seen == []


def test_a_refused_request_is_named_by_its_method_and_target_when_they_were_read(
    tmp_path: Path,
) -> None:
    """Too many headers on ``POST /orders``: the 431 envelope's hint and the log line name
    ``POST /orders`` (every refusal was made from an unreadable placeholder request: the
    agent was told to "send UNKNOWN / again", the log said ``UNKNOWN /``)."""
    with mend_before_raw(tmp_path, max_headers=8) as (mend, _):
        fields = b"".join(b"X-%d: a\r\n" % i for i in range(20))
        raw = raw_exchange(mend.port, b"POST /orders?page=2 HTTP/1.1\r\nHost: a\r\n" + fields)
        time.sleep(0.3)
        lines = [line for line in mend.log_lines() if line.get("event") == "request"]
    assert status_of(raw) == 431
    hint = body_of(raw)["error"]["hint"]
    assert "POST /orders" in hint
    assert "UNKNOWN" not in hint
    assert [(line["method"], line["path"]) for line in lines] == [("POST", "/orders")]
