"""Real processes and raw sockets for the hostile suite: mend as an operator starts it, upstreams
that echo what reached them, listeners that count who connected, and a client that sends bytes
exactly as written (no client library normalises a target or a header here)."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")


def wait_http(url: str, timeout: float = 20.0) -> None:
    """Until ``url`` answers 2xx (``/readyz`` answers 503 while workers start)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:  # HTTPError too
            time.sleep(0.1)
    raise AssertionError(f"{url} did not come up")


@contextmanager
def module_server(module: str, cwd: Path) -> Iterator[str]:
    """``python -m module PORT`` on a free port, its URL, stopped by its PID."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", module, str(port)], cwd=cwd)
    try:
        wait_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@contextmanager
def stream_upstream(root: Path) -> Iterator[str]:
    """``tests/data/stream_upstream.py`` on a free port (``/bytes/N``: N bytes, else a 404), its
    URL, stopped by its PID."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(root / "tests/data/stream_upstream.py"), str(port)]
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/bytes/1")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(5)


def raw_exchange(port: int, data: bytes, timeout: float = 10.0) -> bytes:
    """Send ``data`` on a new connection and read until the server closes or ``timeout``."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
                if _complete(b"".join(chunks)):
                    break
        except TimeoutError:
            pass
    return b"".join(chunks)


def _complete(data: bytes) -> bool:
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value.strip())
    return False


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def body_of(response: bytes) -> Any:
    return json.loads(response.partition(b"\r\n\r\n")[2])


@dataclass
class Recorder:
    """What reached a listener: connections accepted and raw request targets seen."""

    connections: int = 0
    targets: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Echo(http.server.BaseHTTPRequestHandler):
    """Answers every request with the raw target it received, as JSON (no normalisation)."""

    recorder: Recorder
    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        with self.recorder.lock:
            self.recorder.targets.append(self.path)
            self.recorder.headers.append(dict(self.headers.items()))
        body = json.dumps({"target": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _answer

    def log_message(self, *_: Any) -> None:
        pass


class _CountingServer(http.server.ThreadingHTTPServer):
    recorder: Recorder

    def verify_request(self, request: Any, client_address: Any) -> bool:
        with self.recorder.lock:
            self.recorder.connections += 1
        return True


@contextmanager
def echo_server() -> Iterator[tuple[int, Recorder]]:
    """A real HTTP server on loopback that counts connections and echoes the raw target."""
    recorder = Recorder()
    handler = type("Echo", (_Echo,), {"recorder": recorder})
    server = _CountingServer(("127.0.0.1", 0), handler)
    server.recorder = recorder
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], recorder
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class MendProcess:
    proc: subprocess.Popen[bytes]
    port: int
    admin_port: int
    log_path: Path

    def log_lines(self) -> list[dict[str, Any]]:
        lines = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.strip():
                lines.append(json.loads(line))
        return lines

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


@contextmanager
def mend_process(
    tmp: Path, config: dict[str, Any], *, nofile: int | None = None, args: tuple[str, ...] = ()
) -> Iterator[MendProcess]:
    """``mend run --config`` on free ports; its stdout (the JSON log) goes to a file.

    ``nofile`` lowers its file-descriptor limit (as ``ulimit -n`` would) right after it starts.
    """
    port, admin = free_port(), free_port()
    config = {"listen": f"127.0.0.1:{port}", "admin_listen": f"127.0.0.1:{admin}", **config}
    path = tmp / f"mend-{port}.yaml"
    path.write_text(yaml.safe_dump(config))
    log = tmp / f"mend-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "proxy", "run", "--config", str(path), *args],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    if nofile is not None:
        resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (nofile, nofile))
    running = MendProcess(proc, port, admin, log)
    try:
        # a start on a loaded CI machine (two xdist workers, browsers) once took over 20 s
        wait_port(admin, timeout=60)
        wait_port(port)
        yield running
    finally:
        running.stop()


RawHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class RawServer:
    port: int
    connections: int = 0
    closed: int = 0  # connections whose peer (mend) went away


@contextmanager
def raw_server(handler: RawHandler) -> Iterator[RawServer]:
    """An upstream written on raw asyncio, in a thread of its own: it can misbehave in ways no
    HTTP server library allows (drip, storm, never finish), and keeps doing so while the test
    blocks on a socket."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    state = RawServer(port=0)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        state.connections += 1
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            state.closed += 1
        finally:
            writer.close()

    async def start() -> asyncio.Server:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        state.port = server.sockets[0].getsockname()[1]
        return server

    def run() -> None:
        asyncio.set_event_loop(loop)
        server = loop.run_until_complete(start())
        ready.set()
        loop.run_forever()
        server.close()
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield state
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


async def read_head(reader: asyncio.StreamReader) -> bytes:
    """A request's head, up to the blank line."""
    return await reader.readuntil(b"\r\n\r\n")
