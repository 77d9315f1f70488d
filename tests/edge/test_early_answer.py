"""An upstream that answers before it has read the request's body (httpx's test server does:
client-suites ``test_stream_request``): the agent finishes sending the body on its connection,
as it does direct, and may send its next request there."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hostile.procs import MendProcess, RawServer, mend_process, raw_server, read_head


async def answers_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers each request the moment its head is in, then reads whatever follows (the rest
    of a body, the next request) and answers each head it finds."""
    while True:
        await read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
        await writer.drain()
        # a chunked body's rest: up to its last chunk
        rest = await reader.readuntil(b"0\r\n\r\n")
        assert rest.endswith(b"0\r\n\r\n")


@pytest.fixture(scope="module")
def upstream() -> Iterator[RawServer]:
    with raw_server(answers_at_once) as server:
        yield server


@pytest.fixture(scope="module")
def mend(tmp_path_factory: pytest.TempPathFactory, upstream: RawServer) -> Iterator[MendProcess]:
    config = {
        "watch_rules": False,
        "routes": [{"name": "api", "prefix": "/", "upstream": f"http://127.0.0.1:{upstream.port}"}],
    }
    with mend_process(Path(tmp_path_factory.mktemp("early")), config) as running:
        yield running


def _response(sock: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"hello"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_the_rest_of_a_body_is_read_after_an_early_answer(mend: MendProcess) -> None:
    """The agent gets the answer after the first chunk of its body, sends the rest, then a
    second request on the same connection, and gets that answered too. mend used to close the
    connection at once (its lingering read of the body raced the cancelled upstream send), so
    the rest of the body met a reset: httpx then drops its body generator unfinished, which
    trio reports as a ResourceWarning, an error in httpx's suite."""
    with socket.create_connection(("127.0.0.1", mend.port), timeout=5) as sock:
        head = b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        sock.sendall(head + b"7\r\nHello, \r\n")
        first = _response(sock)
        assert first.startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"6\r\nworld!\r\n0\r\n\r\n")
        sock.sendall(b"GET /again HTTP/1.1\r\nHost: x\r\n\r\n")
        second = _response(sock)
    assert second.startswith(b"HTTP/1.1 200 ")
    assert second.endswith(b"hello")
