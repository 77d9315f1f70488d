"""An aiohttp request handed to an ASGI application (the MCP SDK's streamable-HTTP server),
and its answer streamed back.

HTTP only (no WebSocket, no lifespan: the caller runs the application's own). The request body
is read with the proxy's limits (``limit`` bytes, ``idle`` seconds between two chunks): past
them the application's read fails and the agent gets a 413 or a 408. The application learns
that the agent left (``http.disconnect``) when the handler ends or is cancelled, which is what
ends an event stream it holds open.
Libraries exist (``aiohttp-asgi``), but mount an application on an ``aiohttp.web.Application``'s
router, which mend's agent port does not have (``proxy/runtime/app.py``, ``MendServer``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from aiohttp import web

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The scope key carrying the aiohttp request, for the application's handlers.
REQUEST = "mend.request"


async def serve(
    app: App, request: web.BaseRequest, *, limit: int, idle: float
) -> web.StreamResponse:
    """``app``'s answer to ``request``."""
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.raw_path.split("?", 1)[0].encode("latin-1", "replace"),
        "query_string": request.query_string.encode("latin-1", "replace"),
        "root_path": "",
        "headers": [(name.lower(), value) for name, value in request.raw_headers],
        "client": (request.remote or "", 0),
        "server": None,
        "state": {},
        REQUEST: request,
    }
    bridge = _Bridge(request, limit, idle)
    try:
        await app(scope, bridge.receive, bridge.send)
    except _BodyFailed as failed:  # the application could not read what it was sent
        if bridge.response is not None:
            raise
        return web.Response(status=failed.status, text=failed.text, headers={"Server": "mend"})
    finally:
        bridge.done.set()
    if bridge.response is None:  # the application sent nothing: its bug, said plainly
        return web.Response(status=500, text="the MCP server did not answer")
    if not bridge.ended:
        await bridge.response.write_eof()
    return bridge.response


class _BodyFailed(Exception):
    """The request body went past its limit or stopped arriving: the application's read
    fails, and the agent hears ``status``."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status, self.text = status, text


class _Bridge:
    def __init__(self, request: web.BaseRequest, limit: int, idle: float) -> None:
        self.request = request
        self.limit, self.idle = limit, idle
        self.read = 0
        self.body_done = False
        self.done = asyncio.Event()
        self.response: web.StreamResponse | None = None
        self.ended = False
        self._status = 0
        self._headers: list[tuple[str, str]] = []

    async def receive(self) -> Message:
        if self.body_done:
            await self.done.wait()
            return {"type": "http.disconnect"}
        try:
            async with asyncio.timeout(self.idle):
                chunk = await self.request.content.readany()
        except TimeoutError:
            self.body_done = True
            raise _BodyFailed(408, "the MCP request body stopped arriving") from None
        self.read += len(chunk)
        if self.read > self.limit:
            self.body_done = True
            raise _BodyFailed(413, "the MCP request body is too large")
        if not chunk:
            self.body_done = True
        return {"type": "http.request", "body": chunk, "more_body": bool(chunk)}

    async def send(self, message: Message) -> None:
        kind = message.get("type")
        if kind == "http.response.start":
            self._status = int(message["status"])
            self._headers = [
                (bytes(k).decode("latin-1"), bytes(v).decode("latin-1"))
                for k, v in message.get("headers", ())
            ]
            return
        if kind != "http.response.body" or self.ended:
            return
        if self.response is None:
            self.response = web.StreamResponse(status=self._status or 200)
            for name, value in self._headers:
                if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                    self.response.headers.add(name, value)
            self.response.headers["Server"] = "mend"
            await self.response.prepare(self.request)
        body = message.get("body", b"")
        if body:
            await self.response.write(body)
        if not message.get("more_body", False):
            self.ended = True
            await self.response.write_eof()
