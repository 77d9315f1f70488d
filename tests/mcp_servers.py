"""MCP servers for the tests: any ASGI app under uvicorn, and the 1.x SDK in a process of its own.

``asgi_server`` serves an app (a 2.x ``MCPServer``'s, a reference server's) on a free loopback
port. ``sdk1_site`` installs the 1.x SDK once, with ``pip --target``, beside the virtualenv (the
virtualenv's own ``mcp`` is 2.x and cannot be both); ``sdk1_server`` runs
``tests/mcp_sdk1_server.py`` from it on a free loopback port and stops it by its PID.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import uvicorn

from tests.installs import locked
from tests.runtime.test_app import free_port

#: the 1.x release the tests run (the last of the line)
SDK1 = "mcp==1.30.0"
SERVER = Path(__file__).with_name("mcp_sdk1_server.py")


async def read_whole(receive: Any) -> tuple[bytes, Any]:
    """An ASGI request's whole body, and a ``receive`` that hands the app the same messages
    again (for middleware that must look at a call before the app does)."""
    messages, body, more = [], b"", True
    while more:
        message = await receive()
        messages.append(message)
        body += message.get("body", b"")
        more = message.get("more_body", False)
    replay = iter(messages)

    async def receive_again() -> Any:
        try:
            return next(replay)
        except StopIteration:
            return await receive()

    return body, receive_again


@asynccontextmanager
async def asgi_server(app: Any, *, grace_s: int | None = None) -> AsyncIterator[str]:
    """``app`` under uvicorn on a free loopback port; its base URL; stopped after (a request
    still running then is cancelled after ``grace_s``, else awaited)."""
    port = free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=grace_s,
    )
    runner = uvicorn.Server(config)
    task = asyncio.create_task(runner.serve())
    async with asyncio.timeout(10):
        while not runner.started:  # noqa: ASYNC110 (uvicorn offers a flag, not an event)
            await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        runner.should_exit = True
        await asyncio.wait_for(task, 10)


def sdk1_site() -> Path:
    """A directory holding the MCP SDK 1.x and its dependencies, installed on first use."""
    site = Path(sys.prefix) / "mcp-sdk1"
    with locked(site):
        if not (site / "mcp" / "server" / "fastmcp").is_dir():
            command = [sys.executable, "-m", "pip", "install", "--quiet"]
            command += ["--disable-pip-version-check", "--target", str(site), SDK1]
            subprocess.run(command, check=True, timeout=300)
    return site


async def _listening(port: int, proc: asyncio.subprocess.Process) -> None:
    async with asyncio.timeout(20):
        while True:
            if proc.returncode is not None:
                raise RuntimeError(f"the SDK 1.x server exited with {proc.returncode}")
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            return


@asynccontextmanager
async def sdk1_server(site: Path, *, json_response: bool) -> AsyncIterator[str]:
    """An SDK 1.x server (JSON or SSE answers); its base URL; stopped after."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(site)}
    answers = "json" if json_response else "sse"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SERVER),
        str(port),
        answers,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        await _listening(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await asyncio.wait_for(proc.wait(), 10)
