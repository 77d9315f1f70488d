"""Every resource has a cap (issue 13 §2-3): connections, file descriptors, shutdown time.

mend runs as a real process; connections are real sockets, a lowered ``ulimit -n`` is applied
with prlimit(2), and the workers are real processes sharing the port.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.hostile.procs import (
    RawServer,
    body_of,
    mend_process,
    raw_exchange,
    raw_server,
    read_head,
    status_of,
)

REQUEST = b"GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


async def ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        await read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()


#: Longer than the 15 s the supervisor used to give the first worker before killing it.
IN_FLIGHT_S = 17.0


async def slow_ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers 200 ``IN_FLIGHT_S`` after each request: a request in flight at shutdown."""
    await read_head(reader)
    await asyncio.sleep(IN_FLIGHT_S)
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nslow")
    await writer.drain()


@pytest.fixture(scope="module")
def upstream() -> Iterator[RawServer]:
    with raw_server(ok) as server:
        yield server


def _config(upstream: RawServer, **settings: object) -> dict[str, object]:
    return {
        "watch_rules": False,
        "routes": [{"name": "a", "upstream": f"http://127.0.0.1:{upstream.port}"}],
        **settings,
    }


def _idle_connections(port: int, count: int, source: str = "127.0.0.1") -> list[socket.socket]:
    sockets = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind((source, 0))
        sock.connect(("127.0.0.1", port))
        sockets.append(sock)
    time.sleep(0.3)  # let mend accept them all
    return sockets


def test_connection_past_the_cap_gets_a_prompt_503_envelope(
    tmp_path: Path, upstream: RawServer
) -> None:
    """With max_connections open, the next connection's request gets TOO_MANY_CONNECTIONS at
    once (not a hang), and once one closes, requests are served again."""
    with mend_process(tmp_path, _config(upstream, max_connections=5)) as mend, ExitStack() as stack:
        for sock in _idle_connections(mend.port, 5):
            stack.callback(sock.close)
        started = time.monotonic()
        response = raw_exchange(mend.port, REQUEST, timeout=5)
        assert time.monotonic() - started < 1.0
        assert status_of(response) == 503
        error = body_of(response)["error"]
        assert error["code"] == "TOO_MANY_CONNECTIONS"
        assert error["retryable"] is True
        stack.close()
        time.sleep(0.3)
        assert status_of(raw_exchange(mend.port, REQUEST)) == 200


KEEP_ALIVE = b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n"


def _served_connections(port: int, count: int) -> list[socket.socket]:
    """``count`` keep-alive connections that each had one request answered, now idle."""
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(KEEP_ALIVE)
        assert b" 200 " in sock.recv(65536).split(b"\r\n")[0]
        sockets.append(sock)
        time.sleep(0.05)  # distinct idle times: the first is the longest idle
    return sockets


def _closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(2)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_idle_keep_alive_connection_makes_room_at_the_cap(
    tmp_path: Path, upstream: RawServer
) -> None:
    """At max_connections held by idle keep-alive connections, a new client is served: the
    longest-idle connection is closed for it (counted), the others stay open."""
    with mend_process(tmp_path, _config(upstream, max_connections=5)) as mend, ExitStack() as stack:
        held = _served_connections(mend.port, 5)
        for sock in held:
            stack.callback(sock.close)
        assert status_of(raw_exchange(mend.port, REQUEST, timeout=5)) == 200
        assert _closed_by_peer(held[0])
        held[1].sendall(KEEP_ALIVE)
        assert b" 200 " in held[1].recv(65536).split(b"\r\n")[0]
        metrics = raw_exchange(
            mend.admin_port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        assert b"mend_idle_connections_closed_total 1.0" in metrics


def test_per_client_cap_spares_other_clients(tmp_path: Path, upstream: RawServer) -> None:
    """max_connections_per_client limits one address; another loopback address is served."""
    config = _config(upstream, max_connections_per_client=2)
    with mend_process(tmp_path, config) as mend, ExitStack() as stack:
        for sock in _idle_connections(mend.port, 2, source="127.0.0.2"):
            stack.callback(sock.close)
        with socket.socket() as third:
            third.bind(("127.0.0.2", 0))
            third.settimeout(5)
            third.connect(("127.0.0.1", mend.port))
            third.sendall(REQUEST)
            assert b" 503 " in third.recv(65536).split(b"\r\n")[0]
        assert status_of(raw_exchange(mend.port, REQUEST)) == 200


def test_low_file_limit_lowers_the_cap_and_keeps_serving(
    tmp_path: Path, upstream: RawServer
) -> None:
    """Under ``ulimit -n 64`` the cap is lowered to fit (and said so once at start): agents past
    it get 503 envelopes rather than resets, the log stays small, and once connections close
    requests are served again."""
    with mend_process(tmp_path, _config(upstream), nofile=64) as mend, ExitStack() as stack:
        for sock in _idle_connections(mend.port, 40):
            stack.callback(sock.close)
        statuses = [status_of(raw_exchange(mend.port, REQUEST)) for _ in range(200)]
        assert set(statuses) == {503}
        stack.close()
        time.sleep(0.5)
        assert status_of(raw_exchange(mend.port, REQUEST)) == 200
    lines = mend.log_lines()
    lowered = [line for line in lines if line["event"] == "max_connections_lowered"]
    assert len(lowered) == 1
    assert lowered[0]["max_connections"] == (64 - 32) // 2
    assert len(lines) < 250  # one per request and a few more: no traceback storm


@pytest.mark.slow
def test_workers_drain_in_parallel_within_the_grace_period(tmp_path: Path) -> None:
    """SIGTERM to ``--workers 2`` lets every request in flight on either worker finish within
    shutdown_timeout, all workers at once (the supervisor used to kill the first worker after
    15 s, then wait for the next)."""
    with raw_server(slow_ok) as slow:
        config = _config(slow, workers=2, shutdown_timeout=25)
        with mend_process(tmp_path, config) as mend:
            results: list[int] = []

            def call() -> None:
                response = raw_exchange(mend.port, REQUEST, timeout=40)
                results.append(status_of(response) if response else 0)

            threads = [threading.Thread(target=call) for _ in range(8)]
            for thread in threads:
                thread.start()
            time.sleep(1.0)
            started = time.monotonic()
            mend.proc.send_signal(signal.SIGTERM)
            for thread in threads:
                thread.join(40)
            assert mend.proc.wait(40) == 0
            assert time.monotonic() - started < 25
        assert results == [200] * 8
