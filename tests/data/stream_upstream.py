"""A loopback upstream for subprocess tests: /bytes/N streams N bytes, /sink hashes the body."""

from __future__ import annotations

import hashlib
import sys

from aiohttp import web

CHUNK = bytes(range(256)) * 1024  # 256 KiB


async def stream(request: web.Request) -> web.StreamResponse:
    size = int(request.match_info["size"])
    response = web.StreamResponse(headers={"Content-Length": str(size)})
    await response.prepare(request)
    sent = 0
    while sent < size:
        piece = CHUNK[: min(len(CHUNK), size - sent)]
        await response.write(piece)
        sent += len(piece)
    return response


async def sink(request: web.Request) -> web.Response:
    digest = hashlib.sha256()
    async for chunk in request.content.iter_any():
        digest.update(chunk)
    return web.Response(text=digest.hexdigest())


app = web.Application(client_max_size=0)
app.router.add_get("/bytes/{size:\\d+}", stream)
app.router.add_post("/sink", sink)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
