"""WebSocket through mend (issue 14): the upgrade reaches the upstream, its 101 reaches the agent,
and from there bytes pass both ways as the two ends speak them (proxy/edge/tunnel.py).

Real parts only: aiohttp WebSocket servers and hand-written ones on raw asyncio upstream, the
``websockets`` library, aiohttp's client and raw sockets as agents; many behaviours are run
direct and through mend and compared.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import websockets
from aiohttp import WSMsgType, web
from aiohttp.test_utils import TestServer
from multidict import CIMultiDict, CIMultiDictProxy
from websockets.asyncio.client import connect

from proxy.edge.forward import upstream_request_headers, wants_upgrade
from proxy.edge.tunnel import HIGH_WATER, Tunnel
from proxy.runtime.app import MendServer
from tests.conftest import Mend, StartMend, StartUpstream
from tests.hostile.procs import mend_process

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
KEY = "dGhlIHNhbXBsZSBub25jZQ=="
TEXT, BINARY, CONTINUATION, CLOSE = 0x1, 0x2, 0x0, 0x8
#: One socket read asyncio may make past the high-water mark before reading stops.
READ_MAX = 256 << 10
MiB = 1 << 20

RawHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


# --- WebSocket by hand -------------------------------------------------------------------------


def accept_for(key: str) -> str:
    return base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()


def frame(opcode: int, payload: bytes, *, fin: bool = True, masked: bool = False) -> bytes:
    """One frame as RFC 6455 §5.2 lays it out (an agent's are masked, an upstream's are not)."""
    first = (0x80 if fin else 0) | opcode
    mask_bit = 0x80 if masked else 0
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", first, mask_bit | n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", first, mask_bit | 126, n)
    else:
        head = struct.pack("!BBQ", first, mask_bit | 127, n)
    if not masked:
        return head + payload
    key = os.urandom(4)
    return head + key + _unmask(payload, key)


def _unmask(payload: bytes, key: bytes) -> bytes:
    repeated = (key * (len(payload) // 4 + 1))[: len(payload)]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(
        len(payload), "big"
    )


async def read_frame(reader: asyncio.StreamReader) -> tuple[bool, int, bytes, int]:
    """``(fin, opcode, payload, bytes on the wire)`` of the next frame."""
    first, second = await reader.readexactly(2)
    size = second & 0x7F
    wire = 2
    if size == 126:
        (size,) = struct.unpack("!H", await reader.readexactly(2))
        wire += 2
    elif size == 127:
        (size,) = struct.unpack("!Q", await reader.readexactly(8))
        wire += 8
    key = b""
    if second & 0x80:
        key = await reader.readexactly(4)
        wire += 4
    payload = await reader.readexactly(size)
    if key:
        payload = _unmask(payload, key)
    return bool(first & 0x80), first & 0x0F, payload, wire + size


def upgrade_request(path: str = "/ws") -> bytes:
    return (
        f"GET {path} HTTP/1.1\r\nHost: mend.test\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    ).encode()


async def raw_agent(url: str, first: bytes = b"") -> tuple[asyncio.StreamReader, Any, bytes]:
    """A socket that sends the upgrade request (and ``first`` in the same write) and reads the
    response head: ``(reader, writer, head)``."""
    host, port = url.split("//", 1)[1].split("/", 1)[0].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(upgrade_request() + first)
    head = await reader.readuntil(b"\r\n\r\n")
    return reader, writer, head


async def upstream_handshake(reader: asyncio.StreamReader) -> str:
    """Read an upgrade request; the ``Sec-WebSocket-Accept`` that answers it."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    for line in head.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "sec-websocket-key":
            return accept_for(value.strip())
    raise AssertionError(f"no Sec-WebSocket-Key in {head!r}")


def switching(accept: str) -> bytes:
    return (
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Accept: {accept}\r\n\r\n"
    ).encode()


# --- upstreams -----------------------------------------------------------------------------------


@dataclass
class Seen:
    """What an upstream saw."""

    closes: list[tuple[int, str]] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    frames: list[tuple[bool, int, bytes]] = field(default_factory=list)
    headers: list[CIMultiDictProxy[str]] = field(default_factory=list)
    sent: int = 0
    received: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)
    go: asyncio.Event = field(default_factory=asyncio.Event)


def echo(seen: Seen, **options: Any) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """An aiohttp WebSocket echo: text and binary back as they came; ``close CODE REASON`` makes
    it close with that code; ``die`` makes it drop the connection without a close frame."""

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.headers.append(request.headers)
        ws = web.WebSocketResponse(max_msg_size=64 * MiB, **options)
        await ws.prepare(request)
        try:
            while True:
                msg = await ws.receive()
                if msg.type is WSMsgType.TEXT:
                    if msg.data.startswith("close "):
                        _, code, reason = msg.data.split(" ", 2)
                        await ws.close(code=int(code), message=reason.encode())
                        break
                    if msg.data == "die":
                        assert request.transport is not None
                        request.transport.abort()
                        break
                    await ws.send_str(msg.data)
                elif msg.type is WSMsgType.BINARY:
                    await ws.send_bytes(msg.data)
                elif msg.type is WSMsgType.PING:  # autoping=False
                    await ws.pong(msg.data)
                elif msg.type is WSMsgType.CLOSE:
                    seen.closes.append((int(msg.data), msg.extra or ""))
                    break
                else:
                    seen.ended.append(msg.type.name)
                    break
        finally:
            seen.done.set()
        return ws

    return handler


@pytest.fixture
async def raw_upstream() -> AsyncIterator[Callable[[RawHandler], Awaitable[str]]]:
    """Start an upstream written on raw asyncio (for what no server library sends); its URL."""
    servers: list[asyncio.Server] = []

    async def start(handler: RawHandler) -> str:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    yield start
    for server in servers:
        server.close()


def ws_url(base: str | TestServer | Mend, path: str = "/ws") -> str:
    """The ``ws://`` URL of ``path`` on an upstream, on mend, or under a base URL."""
    # by attribute: pytest's conftest module is not always the ``tests.conftest`` imported here
    if isinstance(base, TestServer):
        base = str(base.make_url("/"))
    elif not isinstance(base, str):
        base = str(base.client.make_url("/"))
    return "ws" + base.rstrip("/").removeprefix("http") + path


def ws_connect(url: str, **options: Any) -> connect:
    """The ``websockets`` client, silent unless asked (no keepalive pings), no proxy from env."""
    return connect(url, proxy=None, ping_interval=None, **options)


async def both(
    start_upstream: StartUpstream, start_mend: StartMend, seen: Seen, **options: Any
) -> tuple[Mend, dict[str, str]]:
    """An echo upstream and mend in front of it: mend, and the WebSocket URL each way."""
    upstream = await start_upstream({"GET /ws": echo(seen, **options)})
    mend = await start_mend(upstream)
    return mend, {"direct": ws_url(upstream), "mend": ws_url(mend)}


async def eventually(check: Callable[[], bool], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def mend_server(mend: Mend) -> MendServer:
    server: Any = mend.client.server  # a MendTestServer
    assert isinstance(server.mend, MendServer)
    return server.mend


def tunnel_of(mend: Mend) -> Tunnel:
    (tunnel,) = mend_server(mend).proxy.websockets.tunnels
    return tunnel


def ended(mend: Mend) -> bool:
    """Whether mend has logged the end of a session."""
    return any(line["event"] == "websocket_closed" for line in mend.log_lines())


def closed_by(mend: Mend) -> str:
    lines = [line for line in mend.log_lines() if line["event"] == "websocket_closed"]
    assert len(lines) == 1, lines
    return str(lines[0]["closed_by"])


# --- the handshake -------------------------------------------------------------------------------


def test_upgrade_headers_are_forwarded_for_websocket_only() -> None:
    """``Upgrade: websocket`` and ``Connection: Upgrade`` reach the upstream with the agent's
    ``Sec-WebSocket-*``; another upgrade (``h2c``) is dropped as hop-by-hop."""

    def forwarded(*pairs: tuple[str, str]) -> CIMultiDict[str]:
        given = CIMultiDictProxy(CIMultiDict(pairs))
        return upstream_request_headers(
            given,
            request_id="r",
            client_ip=None,
            scheme="http",
            host=None,
            upstream_host="up",
            preserve_host=False,
        )

    ws = forwarded(
        ("Upgrade", "WebSocket"),
        ("Connection", "keep-alive, Upgrade"),
        ("Sec-WebSocket-Key", KEY),
        ("Sec-WebSocket-Protocol", "a, b"),
        ("Sec-WebSocket-Extensions", "permessage-deflate"),
    )
    assert ws["Upgrade"] == "WebSocket"
    assert ws["Connection"] == "Upgrade"
    assert ws["Sec-WebSocket-Protocol"] == "a, b"
    assert ws["Sec-WebSocket-Extensions"] == "permessage-deflate"
    h2c = forwarded(("Upgrade", "h2c"), ("Connection", "Upgrade, HTTP2-Settings"))
    assert "Upgrade" not in h2c
    assert "Connection" not in h2c
    assert not wants_upgrade(CIMultiDictProxy(CIMultiDict([("Upgrade", "websocket")])))


async def test_text_and_binary_echo(start_upstream: StartUpstream, start_mend: StartMend) -> None:
    """Text and binary messages come back the same through mend as direct (``websockets``)."""
    _, urls = await both(start_upstream, start_mend, Seen())
    answers = {}
    for way, url in urls.items():
        async with ws_connect(url) as ws:
            got: list[str | bytes] = []
            for message in ("hello", "héllo ✓", b"\x00\x01\xff", b""):
                await ws.send(message)
                got.append(await ws.recv())
            answers[way] = got
    assert answers["mend"] == answers["direct"] == ["hello", "héllo ✓", b"\x00\x01\xff", b""]


async def test_aiohttp_client_echo(start_upstream: StartUpstream, start_mend: StartMend) -> None:
    """aiohttp's own WebSocket client works through mend: text, binary, a clean close."""
    mend, _ = await both(start_upstream, start_mend, Seen())
    async with mend.client.ws_connect("/ws") as ws:
        await ws.send_str("one")
        assert await ws.receive_str() == "one"
        await ws.send_bytes(b"two")
        assert await ws.receive_bytes() == b"two"
    assert ws.close_code == 1000


async def test_one_mib_messages(start_upstream: StartUpstream, start_mend: StartMend) -> None:
    """A 1 MiB message each way arrives whole."""
    mend, _ = await both(start_upstream, start_mend, Seen(), compress=False)
    payload = os.urandom(MiB)
    async with ws_connect(ws_url(mend), compression=None, max_size=4 * MiB) as ws:
        await ws.send(payload)
        assert await ws.recv() == payload
        await ws.send(payload.hex()[:MiB])
        assert await ws.recv() == payload.hex()[:MiB]


async def test_fragments_pass_as_fragments(
    start_mend: StartMend, raw_upstream: Callable[[RawHandler], Awaitable[str]]
) -> None:
    """A fragmented message reaches the upstream as the same frames (fin, opcode, payload), and
    the upstream's fragments reach the client as fragments: mend reassembles nothing."""
    seen = Seen()

    async def fragment_echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(switching(await upstream_handshake(reader)))
        while True:
            fin, opcode, payload, _ = await read_frame(reader)
            if opcode == CLOSE:
                writer.write(frame(CLOSE, payload))
                writer.close()
                return
            seen.frames.append((fin, opcode, payload))
            writer.write(frame(opcode, payload, fin=fin))

    upstream = await raw_upstream(fragment_echo)
    mend = await start_mend(upstream)
    pieces: dict[str, list[str | bytes]] = {}
    for way, url in {"direct": ws_url(upstream), "mend": ws_url(mend)}.items():
        async with ws_connect(url, compression=None) as ws:
            await ws.send(["frag", "ment", "ed"])
            pieces[way] = [part async for part in ws.recv_streaming()]
    # (``recv_streaming`` ends a message with an empty piece)
    assert pieces["mend"] == pieces["direct"] == ["frag", "ment", "ed", ""]
    # as ``websockets`` fragments: every piece unfinished, then an empty final frame
    expected = [
        (False, TEXT, b"frag"),
        (False, CONTINUATION, b"ment"),
        (False, CONTINUATION, b"ed"),
        (True, CONTINUATION, b""),
    ]
    assert seen.frames == expected * 2  # direct, then through mend


async def test_pings_both_ways(start_upstream: StartUpstream, start_mend: StartMend) -> None:
    """The agent's ping gets the upstream's pong, and the upstream's ping the agent's pong, each
    with its payload."""
    seen = Seen()

    async def pinger(request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(autoping=False)
        await ws.prepare(request)
        await ws.ping(b"from-upstream")
        while (msg := await ws.receive()).type is not WSMsgType.PONG:
            if msg.type is WSMsgType.PING:
                await ws.pong(msg.data)
        seen.frames.append((True, 0xA, msg.data))
        await ws.close()
        return ws

    upstream = await start_upstream({"GET /ws": pinger})
    mend = await start_mend(upstream)
    async with mend.client.ws_connect("/ws", autoping=False) as ws:
        msg = await ws.receive()
        assert (msg.type, msg.data) == (WSMsgType.PING, b"from-upstream")
        await ws.ping(b"from-agent")
        msg = await ws.receive()
        assert (msg.type, msg.data) == (WSMsgType.PONG, b"from-agent")
        await ws.pong(b"from-upstream")
        assert (await ws.receive()).type is WSMsgType.CLOSE
    assert seen.frames == [(True, 0xA, b"from-upstream")]


async def test_upstream_close_code_reaches_the_agent(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """The upstream's close code and reason (4001 "bye") reach the agent as they do direct."""
    _, urls = await both(start_upstream, start_mend, Seen())
    closes = {}
    for way, url in urls.items():
        async with ws_connect(url) as ws:
            await ws.send("close 4001 bye")
            with pytest.raises(websockets.ConnectionClosed):
                await ws.recv()
            closes[way] = (ws.close_code, ws.close_reason)
    assert closes["mend"] == closes["direct"] == (4001, "bye")


async def test_agent_close_code_reaches_the_upstream(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """The agent's close (1000 "done") reaches the upstream as it does direct, and the agent
    gets the upstream's answering close."""
    seen = Seen()
    _, urls = await both(start_upstream, start_mend, seen)
    for url in urls.values():
        async with ws_connect(url) as ws:
            await ws.close(1000, "done")
            assert ws.close_code == 1000
    await eventually(lambda: len(seen.closes) == 2)
    assert seen.closes == [(1000, "done"), (1000, "done")]


async def test_subprotocol_is_the_upstreams_choice(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """The agent offers ``a, b``; the upstream supports only ``b``: ``b`` is what the agent gets,
    in ``Sec-WebSocket-Protocol``, through mend as direct."""
    seen = Seen()
    _, urls = await both(start_upstream, start_mend, seen, protocols=("b",))
    chosen = {}
    for way, url in urls.items():
        async with ws_connect(url, subprotocols=["a", "b"]) as ws:
            chosen[way] = ws.subprotocol
    assert chosen["mend"] == chosen["direct"] == "b"
    assert [h["Sec-WebSocket-Protocol"] for h in seen.headers] == ["a, b", "a, b"]


async def test_permessage_deflate_is_negotiated_end_to_end(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """permessage-deflate is agreed between the agent and the upstream (mend does not strip the
    offer) and the compressed bytes pass through: a 1 MiB compressible message costs a few KB."""
    seen = Seen()
    mend, urls = await both(start_upstream, start_mend, seen)
    extensions = {}
    for way, url in urls.items():
        async with ws_connect(url, max_size=4 * MiB) as ws:
            assert ws.response is not None
            extensions[way] = ws.response.headers.get("Sec-WebSocket-Extensions")
            await ws.send("a" * MiB)
            assert await ws.recv() == "a" * MiB
    assert extensions["mend"] == extensions["direct"]
    assert str(extensions["mend"]).startswith("permessage-deflate")
    await eventually(lambda: ended(mend))
    sent = mend.metric("mend_websocket_bytes_total", route="default", direction="to_upstream")
    received = mend.metric("mend_websocket_bytes_total", route="default", direction="to_agent")
    assert 0 < sent < 64 << 10
    assert 0 < received < 64 << 10


async def test_bytes_right_after_the_101_are_not_lost(
    start_mend: StartMend, raw_upstream: Callable[[RawHandler], Awaitable[str]]
) -> None:
    """An upstream that writes its 101 and its first frames in one write (past the head parser's
    4 KiB slices): every byte after the head reaches the agent, in order."""
    big = os.urandom(20_000)

    async def eager(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accept = await upstream_handshake(reader)
        writer.write(switching(accept) + frame(TEXT, b"early") + frame(BINARY, big))
        await read_frame(reader)  # the agent's close
        writer.write(frame(CLOSE, struct.pack("!H", 1000)))
        writer.close()

    upstream = await raw_upstream(eager)
    mend = await start_mend(upstream)
    for url in (ws_url(upstream), ws_url(mend)):
        async with ws_connect(url, compression=None) as ws:
            assert await ws.recv() == "early"
            assert await ws.recv() == big


async def test_agent_bytes_right_after_its_request_are_not_lost(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """An agent that sends a frame in the same write as its upgrade request gets it echoed: the
    bytes behind the request head go upstream once the tunnel is up."""
    mend, _ = await both(start_upstream, start_mend, Seen(), compress=False)
    reader, writer, head = await raw_agent(ws_url(mend), frame(TEXT, b"eager", masked=True))
    assert head.startswith(b"HTTP/1.1 101 ")
    assert f"\r\nSec-WebSocket-Accept: {accept_for(KEY)}\r\n".encode() in head
    assert (await read_frame(reader))[:3] == (True, TEXT, b"eager")
    writer.close()


async def test_upgraded_connection_is_never_pooled(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """After a session, the next request reaches the upstream on a new connection: the upgraded
    one went back to no pool."""
    peers: list[object] = []

    async def plain(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        peers.append(request.transport.get_extra_info("peername"))
        return web.Response(text="plain")

    seen = Seen()
    ws_handler = echo(seen)

    async def recorded(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        peers.append(request.transport.get_extra_info("peername"))
        return await ws_handler(request)

    upstream = await start_upstream({"GET /ws": recorded, "GET /plain": plain})
    mend = await start_mend(upstream)
    async with ws_connect(ws_url(mend)) as ws:
        await ws.send("hi")
        assert await ws.recv() == "hi"
    await eventually(lambda: ended(mend))
    for _ in range(2):
        response = await mend.client.get("/plain")
        assert await response.text() == "plain"
    websocket, first, second = peers
    assert first != websocket
    assert second == first  # ordinary requests still share a pooled connection


async def test_upgrade_an_upstream_ignores_is_a_plain_response(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """An upstream that answers an upgrade request with an ordinary 200 (it may ignore
    ``Upgrade``): the agent gets that response, and its connection serves the next request."""

    async def ignores(request: web.Request) -> web.StreamResponse:
        return web.Response(text=f"upgrade={request.headers.get('Upgrade')}")

    upstream = await start_upstream({"/ws": ignores})
    mend = await start_mend(upstream)
    headers = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Key": KEY}
    response = await mend.client.get("/ws", headers={**headers, "Sec-WebSocket-Version": "13"})
    assert (response.status, await response.text()) == (200, "upgrade=websocket")
    assert "Upgrade" not in response.headers
    again = await mend.client.get("/ws")
    assert (again.status, await again.text()) == (200, "upgrade=None")
    assert mend.metric("mend_websocket_sessions_total", route="default") == 0


# --- ends ----------------------------------------------------------------------------------------


async def test_agent_gone_closes_the_upstream(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """An agent whose connection drops without a close frame: the upstream's connection is
    closed too, and the session ends ``by="agent"``."""
    seen = Seen()
    mend, _ = await both(start_upstream, start_mend, seen)
    _, writer, head = await raw_agent(ws_url(mend))
    assert head.startswith(b"HTTP/1.1 101 ")
    writer.transport.abort()
    await asyncio.wait_for(seen.done.wait(), 5)  # its handler saw the connection end
    assert seen.closes == []
    await eventually(lambda: ended(mend))
    assert closed_by(mend) == "agent"
    assert mend.metric("mend_websocket_closed_total", route="default", by="agent") == 1


async def test_upstream_gone_closes_the_agent(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """An upstream whose connection drops without a close frame: the agent's is closed too (as
    direct: close code 1006), and the session ends ``by="upstream"``."""
    mend, urls = await both(start_upstream, start_mend, Seen())
    codes = {}
    for way, url in urls.items():
        async with ws_connect(url) as ws:
            await ws.send("die")
            with pytest.raises(websockets.ConnectionClosedError):
                await ws.recv()
            codes[way] = ws.close_code
    assert codes["mend"] == codes["direct"] == 1006
    await eventually(lambda: ended(mend))
    assert closed_by(mend) == "upstream"


async def test_idle_tunnel_is_closed(start_upstream: StartUpstream, start_mend: StartMend) -> None:
    """No byte either way for the route's ``idle_timeout``: both sides are closed."""
    seen = Seen()
    upstream = await start_upstream({"GET /ws": echo(seen)})
    mend = await start_mend(upstream, route={"idle_timeout": 0.3})
    started = time.monotonic()
    async with ws_connect(ws_url(mend)) as ws:
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 5)
    assert 0.25 < time.monotonic() - started < 3
    await asyncio.wait_for(seen.done.wait(), 5)
    await eventually(lambda: ended(mend))
    assert closed_by(mend) == "timeout"


async def test_traffic_keeps_a_tunnel_open(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """Bytes keep resetting the idle timer: a conversation longer than ``idle_timeout`` with
    shorter pauses goes on."""
    upstream = await start_upstream({"GET /ws": echo(Seen())})
    mend = await start_mend(upstream, route={"idle_timeout": 0.4})
    async with ws_connect(ws_url(mend)) as ws:
        for i in range(6):
            await asyncio.sleep(0.15)
            await ws.send(str(i))
            assert await ws.recv() == str(i)


async def test_shutdown_ends_tunnels(start_upstream: StartUpstream, start_mend: StartMend) -> None:
    """When mend stops, open sessions are closed at once (``by="shutdown"``), not left
    relaying one way while aiohttp stops reading agents."""
    seen = Seen()
    mend, _ = await both(start_upstream, start_mend, seen)
    async with ws_connect(ws_url(mend)) as ws:
        await ws.send("up")
        assert await ws.recv() == "up"
        mend_server(mend).pre_shutdown()
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 5)
    await asyncio.wait_for(seen.done.wait(), 5)
    await eventually(lambda: ended(mend))
    assert closed_by(mend) == "shutdown"


# --- refusals ------------------------------------------------------------------------------------


async def test_refused_upgrade_gets_the_envelope(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """An upstream that answers the upgrade with 403 and a JSON body: the agent gets mend's
    envelope (status kept, ``X-Error-Code``), and no session is counted."""

    async def forbidden(request: web.Request) -> web.StreamResponse:
        return web.json_response({"error": "forbidden", "detail": "no socket for you"}, status=403)

    upstream = await start_upstream({"GET /ws": forbidden})
    mend = await start_mend(upstream)
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await mend.client.ws_connect("/ws")
    assert refused.value.status == 403
    response = await mend.client.get(
        "/ws",
        headers={
            "Upgrade": "websocket",
            "Connection": "Upgrade",
            "Sec-WebSocket-Key": KEY,
            "Sec-WebSocket-Version": "13",
        },
    )
    assert response.status == 403
    assert response.headers["X-Error-Code"]
    body = await response.json()
    assert body["error"]["code"] == response.headers["X-Error-Code"]
    assert mend.metric("mend_websocket_sessions_total", route="default") == 0
    assert mend.metric("mend_requests_total", route="default", outcome="envelope") == 2


SWITCHED = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"


@pytest.mark.parametrize(
    ("request_head", "answer"),
    [
        # a 101 nobody asked for
        (b"GET /ws HTTP/1.1\r\nHost: x\r\n\r\n", SWITCHED),
        # a 101 without Upgrade: the bytes after it would be HTTP to aiohttp
        (upgrade_request(), b"HTTP/1.1 101 Switching Protocols\r\n\r\n"),
    ],
    ids=["unasked", "no-upgrade-header"],
)
async def test_unrelayable_101_is_a_protocol_error(
    start_mend: StartMend,
    raw_upstream: Callable[[RawHandler], Awaitable[str]],
    request_head: bytes,
    answer: bytes,
) -> None:
    """A 101 mend cannot relay gets the ``UPSTREAM_PROTOCOL_ERROR`` envelope (502)."""

    async def switcher(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        await reader.read()

    mend = await start_mend(await raw_upstream(switcher))
    reader, writer = await asyncio.open_connection(mend.client.host, mend.client.port)
    writer.write(request_head)
    head = await reader.readuntil(b"\r\n\r\n")
    writer.close()
    assert head.startswith(b"HTTP/1.1 502 ")
    assert b"x-error-code: upstream_protocol_error" in head.lower()
    assert mend.metric("mend_websocket_sessions_total", route="default") == 0


# --- accounting ----------------------------------------------------------------------------------


async def test_session_is_counted_and_logged(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """One session: a ``request`` line (status 101, outcome ``websocket``) as it opens, a
    ``websocket_closed`` line as it ends, and the metrics, bytes exact both ways."""
    mend, _ = await both(start_upstream, start_mend, Seen(), compress=False)
    reader, writer, head = await raw_agent(ws_url(mend))
    assert head.startswith(b"HTTP/1.1 101 ")
    assert mend.metric("mend_websocket_sessions_open", route="default") == 1
    sent = frame(TEXT, b"x" * 100, masked=True)
    writer.write(sent)
    _, _, payload, echoed = await read_frame(reader)
    assert payload == b"x" * 100
    goodbye = frame(CLOSE, struct.pack("!H", 1000), masked=True)
    writer.write(goodbye)
    received = echoed + len(await reader.read())  # the upstream's close, then its FIN
    writer.close()
    await eventually(lambda: ended(mend))
    request, closing = (
        e for e in mend.log_lines() if e["event"] in ("request", "websocket_closed")
    )
    assert request["status"] == 101
    assert request["outcome"] == "websocket"
    assert closing["request_id"] == request["request_id"]
    assert closing["bytes_to_upstream"] == len(sent) + len(goodbye)
    assert closing["bytes_to_agent"] == received
    assert closing["closed_by"] == "upstream"
    assert closing["duration_ms"] > 0
    assert mend.metric("mend_requests_total", route="default", outcome="websocket") == 1
    assert mend.metric("mend_websocket_sessions_total", route="default") == 1
    assert mend.metric("mend_websocket_sessions_open", route="default") == 0
    assert mend.metric("mend_websocket_closed_total", route="default", by="upstream") == 1
    assert mend.metric(
        "mend_websocket_bytes_total", route="default", direction="to_upstream"
    ) == len(sent) + len(goodbye)
    assert (
        mend.metric("mend_websocket_bytes_total", route="default", direction="to_agent") == received
    )


# --- backpressure --------------------------------------------------------------------------------


async def test_agent_that_does_not_read_stops_the_upstream(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """An upstream sending 50 MiB to an agent that does not read: mend's buffer toward the agent
    stays under the high-water mark plus one read, the upstream is held back, and once the agent
    reads, all 50 MiB arrive intact."""
    seen = Seen()
    chunk = os.urandom(MiB)

    async def flood(request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(compress=False)
        await ws.prepare(request)
        for _ in range(50):
            await ws.send_bytes(chunk)
            seen.sent += len(chunk)
        await ws.close()
        return ws

    upstream = await start_upstream({"GET /ws": flood})
    mend = await start_mend(upstream)
    reader, writer, head = await raw_agent(ws_url(mend))
    assert head.startswith(b"HTTP/1.1 101 ")
    tunnel = tunnel_of(mend)
    assert tunnel._agent_transport is not None
    largest = 0
    for _ in range(100):  # a second of not reading
        await asyncio.sleep(0.01)
        largest = max(largest, tunnel._agent_transport.get_write_buffer_size())
    assert largest <= HIGH_WATER + READ_MAX
    assert seen.sent < 40 * MiB  # held back (what is sent sits in kernel socket buffers)
    total = 0
    while (message := await read_frame(reader))[1] == BINARY:
        assert message[2] == chunk
        total += len(message[2])
    assert total == 50 * MiB
    writer.close()


async def test_upstream_that_does_not_read_stops_the_agent(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """An agent sending 50 MiB to an upstream that does not read: mend's buffer toward the
    upstream stays bounded, the agent is held back, and once the upstream reads, all arrive."""
    seen = Seen()

    async def sink(request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(compress=False, max_msg_size=2 * MiB)
        await ws.prepare(request)
        await seen.go.wait()
        while (msg := await ws.receive()).type is WSMsgType.BINARY:
            seen.received += len(msg.data)
            if seen.received == 50 * MiB:
                await ws.close()
        return ws

    upstream = await start_upstream({"GET /ws": sink})
    mend = await start_mend(upstream)
    chunk = os.urandom(MiB)
    async with ws_connect(ws_url(mend), compression=None) as ws:
        sent = 0

        async def send_all() -> None:
            nonlocal sent
            for _ in range(50):
                await ws.send(chunk)
                sent += len(chunk)

        sending = asyncio.create_task(send_all())
        tunnel = tunnel_of(mend)
        assert tunnel._upstream_transport is not None
        largest = 0
        for _ in range(100):
            await asyncio.sleep(0.01)
            largest = max(largest, tunnel._upstream_transport.get_write_buffer_size())
        assert largest <= HIGH_WATER + READ_MAX
        assert sent < 40 * MiB
        seen.go.set()
        await asyncio.wait_for(sending, 20)
        await asyncio.wait_for(ws.wait_closed(), 20)
    assert seen.received == 50 * MiB


@pytest.mark.slow
async def test_mend_memory_stays_flat_under_a_flood(
    tmp_path: Path, start_upstream: StartUpstream
) -> None:
    """mend as an operator runs it (a process): an upstream pushing 50 MiB to an agent that does
    not read grows mend's resident memory by a few MiB at most, not by what was pushed."""
    chunk = os.urandom(MiB)
    sent = 0

    async def flood(request: web.Request) -> web.StreamResponse:
        nonlocal sent
        ws = web.WebSocketResponse(compress=False)
        await ws.prepare(request)
        for _ in range(50):
            await ws.send_bytes(chunk)
            sent += len(chunk)
        await ws.close()
        return ws

    upstream = await start_upstream({"GET /ws": flood, "GET /small": echo(Seen())})
    base = str(upstream.make_url("/")).rstrip("/")
    config = {"watch_rules": False, "routes": [{"name": "ws", "upstream": base}]}
    with mend_process(tmp_path, config) as running:
        url = f"http://127.0.0.1:{running.port}"

        def rss() -> int:
            status = Path(f"/proc/{running.proc.pid}/status").read_text()
            line = next(x for x in status.splitlines() if x.startswith("VmRSS:"))
            return int(line.split()[1]) * 1024

        async with ws_connect(ws_url(url, "/small")) as ws:  # warm: imports, first tunnel
            await ws.send(b"x" * MiB)
            await ws.recv()
        before = rss()
        reader, writer, _ = await raw_agent(ws_url(url))
        await asyncio.sleep(2)
        grown = rss() - before
        assert sent < 40 * MiB
        assert grown < 8 * MiB, f"mend grew {grown / MiB:.1f} MiB"
        total = 0
        while (message := await read_frame(reader))[1] == BINARY:
            total += len(message[2])
        assert total == 50 * MiB
        writer.close()
