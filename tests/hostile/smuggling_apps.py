"""The origins of the smuggling test (``test_smuggling.py``): one app, written for ASGI (uvicorn
with h11 and with httptools), WSGI (gunicorn) and aiohttp (its C and its Python parser).

Each answers every request it parses with a 200 naming the target it read (``X-Origin-Target``)
and appends one JSON line per request to the file ``ORIGIN_LOG`` names: its method, target and
body as the origin's own parser framed them. That file is the ground truth of what an origin
read as requests, whatever mend answered the agent.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any


def record(method: str, target: str, body: bytes) -> bytes:
    """One parsed request into the log; the answer's body."""
    line = {"method": method, "target": target, "body": body.decode("latin-1")}
    with open(os.environ["ORIGIN_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps(line) + "\n")
    return json.dumps({"target": target, "received": len(body)}).encode()


def _headers(target: str, answer: bytes) -> list[tuple[str, str]]:
    return [
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(answer))),
        ("X-Origin-Target", target.encode("latin-1", "replace").decode("latin-1")),
    ]


async def asgi(
    scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]
) -> None:
    """The app under uvicorn (``--ws none``: an upgrade request is a plain one)."""
    if scope["type"] != "http":
        return
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    query = scope["query_string"]
    target = (scope["raw_path"] + (b"?" + query if query else b"")).decode("latin-1")
    answer = record(scope["method"], target, body)
    headers = [(n.encode(), v.encode("latin-1")) for n, v in _headers(target, answer)]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": answer})


def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """The app under gunicorn (``gthread``: keep-alive connections)."""
    body = environ["wsgi.input"].read()
    target = environ.get("RAW_URI") or environ["PATH_INFO"]
    answer = record(environ["REQUEST_METHOD"], target, body)
    start_response("200 OK", _headers(target, answer))
    return [answer]


def serve_aiohttp(port: int) -> None:
    """The app on aiohttp's server (``AIOHTTP_NO_EXTENSIONS=1``: its Python parser)."""
    from aiohttp import web  # noqa: PLC0415 (the ASGI and WSGI origins need none of it)

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        answer = record(request.method, request.raw_path, body)
        return web.Response(body=answer, headers=dict(_headers(request.raw_path, answer)))

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


if __name__ == "__main__":
    serve_aiohttp(int(sys.argv[1]))
