"""Real origins for the smuggling test, each a process of its own, and a tap in front of them.

Seven origins, seven HTTP/1.1 parsers nobody here wrote: uvicorn with h11 and with httptools,
gunicorn, aiohttp with its C and its Python parser, Node's ``http`` and nginx. Each writes what
it parsed, one JSON line per request, to its own log (``smuggling_apps.py``,
``smuggling_origin.js``; nginx's access log). The ``Tap`` sits between mend and an origin and
keeps the bytes mend sent on each upstream connection, as they were sent.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.upstream import nginx_path
from tests.hostile.procs import ROOT, free_port, raw_server, wait_port

HERE = Path(__file__).resolve().parent

#: origin name -> what it needs that may be missing (``None``: always there)
ORIGINS = {
    "uvicorn-h11": None,
    "uvicorn-httptools": None,
    "gunicorn": None,
    "aiohttp": None,
    "aiohttp-python": None,
    "node": "node",
    "nginx": "nginx",
}

NGINX_CONF = """
daemon off;
master_process off;
worker_processes 1;
error_log {dir}/error.log warn;
pid {dir}/nginx.pid;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    log_format parsed escape=json
        '{{"method":"$request_method","target":"$request_uri","body":null}}';
    server {{
        listen 127.0.0.1:{port};
        keepalive_requests 1000;
        location / {{
            access_log {log} parsed;
            add_header X-Origin-Target $request_uri always;
            default_type application/json;
            return 200 '{{"target":"$request_uri"}}';
        }}
    }}
}}
"""


def missing(name: str) -> str | None:
    """Why ``name`` cannot run here, or ``None``."""
    tool = ORIGINS[name]
    if tool == "node" and shutil.which("node") is None:
        return "needs node (scripts/install-system-deps installs it)"
    if tool == "nginx" and nginx_path() is None:
        return "needs nginx (scripts/install-system-deps installs it)"
    return None


@dataclass
class Origin:
    name: str
    port: int
    log: Path

    def parsed(self) -> list[dict[str, Any]]:
        """Every request the origin parsed so far, in order."""
        if not self.log.exists():
            return []
        text = self.log.read_text("utf-8")
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def settled(self, quiet: float = 0.25, within: float = 3.0) -> list[dict[str, Any]]:
        """``parsed()`` once it has not grown for ``quiet`` seconds (at most ``within``)."""
        deadline = time.monotonic() + within
        seen = self.parsed()
        while time.monotonic() < deadline:
            time.sleep(quiet)
            now = self.parsed()
            if len(now) == len(seen):
                return now
            seen = now
        return seen


def _command(name: str, port: int, tmp: Path) -> list[str]:
    python = sys.executable
    if name.startswith("uvicorn"):
        http = name.split("-")[1]
        return [
            python, "-m", "uvicorn", "tests.hostile.smuggling_apps:asgi", "--host", "127.0.0.1",
            "--port", str(port), "--http", http, "--ws", "none", "--lifespan", "off",
            "--log-level", "warning",
        ]  # fmt: skip
    if name == "gunicorn":
        return [
            python, "-m", "gunicorn", "tests.hostile.smuggling_apps:wsgi", "-b",
            f"127.0.0.1:{port}", "-w", "1", "-k", "gthread", "--threads", "4",
            "--keep-alive", "30", "--log-level", "warning",
        ]  # fmt: skip
    if name.startswith("aiohttp"):
        return [python, "-m", "tests.hostile.smuggling_apps", str(port)]
    if name == "node":
        return ["node", str(HERE / "smuggling_origin.js"), str(port), str(tmp / "parsed.jsonl")]
    exe = nginx_path()
    assert exe is not None
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(dir=tmp, port=port, log=tmp / "parsed.jsonl"))
    return [exe, "-c", str(conf), "-p", str(tmp), "-e", str(tmp / "early.log")]


@contextmanager
def origin(name: str, tmp: Path) -> Iterator[Origin]:
    """The origin ``name`` on a free loopback port, stopped by its PID after."""
    tmp.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = tmp / "parsed.jsonl"
    env = {**os.environ, "ORIGIN_LOG": str(log), "PYTHONUNBUFFERED": "1"}
    if name == "aiohttp-python":
        env["AIOHTTP_NO_EXTENSIONS"] = "1"
    with (tmp / "origin.out").open("wb") as out:
        proc = subprocess.Popen(
            _command(name, port, tmp), cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        wait_port(port)
        yield Origin(name, port, log)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@dataclass
class Tap:
    """A TCP relay between mend and an origin: the bytes mend sent, per upstream connection."""

    target: int
    port: int = 0
    #: one entry per upstream connection mend opened, in order: the bytes it sent on it
    streams: list[bytearray] = field(default_factory=list)

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, into: bytearray | None
    ) -> None:
        try:
            while data := await reader.read(65536):
                if into is not None:
                    into += data
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stream = bytearray()
        self.streams.append(stream)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        await asyncio.gather(
            self._pipe(reader, up_writer, stream), self._pipe(up_reader, writer, None)
        )


@contextmanager
def tap(target: int) -> Iterator[Tap]:
    """A ``Tap`` to the origin on ``target``, served from a thread of its own (``raw_server``)."""
    state = Tap(target)
    with raw_server(state.serve) as server:
        state.port = server.port
        yield state
