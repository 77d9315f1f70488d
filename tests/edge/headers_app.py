"""An ASGI upstream for tests/edge/test_headers.py, served by uvicorn: every name it sends is
lower case (as uvicorn's, h11's and hypercorn's are), and its errors carry CORS headers, a
header of the API's own and headers that describe their body."""

from __future__ import annotations

from typing import Any

Scope = dict[str, Any]
Receive = Any
Send = Any

#: the JSON error body every error path answers with (a FastAPI-like 404)
NOT_FOUND = b'{"detail": "Not Found"}'


def _origin(scope: Scope) -> bytes:
    """The request's Origin, echoed as CORS middlewares echo an allowed one."""
    for name, value in scope["headers"]:
        if name == b"origin":
            return bytes(value)
    return b"*"


def _cors(scope: Scope) -> list[tuple[bytes, bytes]]:
    return [
        (b"access-control-allow-origin", _origin(scope)),
        (b"access-control-allow-credentials", b"true"),
        (b"access-control-expose-headers", b"X-More-Info, X-Request-ID"),
        (b"vary", b"Origin"),
    ]


def _answer(scope: Scope) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    path = scope["path"]
    if path == "/missing":
        headers = [
            (b"content-type", b"application/json"),
            *_cors(scope),
            (b"x-more-info", b"https://docs.example/errors/not-found"),
            (b"link", b'</docs/errors>; rel="help"'),
            (b"cache-control", b"no-store"),
            (b"etag", b'"v1-error"'),
            (b"last-modified", b"Wed, 02 Dec 2026 10:00:00 GMT"),
            (b"content-language", b"de"),
            (b"content-md5", b"Q2hlY2sgSW50ZWdyaXR5IQ=="),
            (b"x-powered-by", b"Express"),
            (b"x-help", b"see http://10.1.2.3:9000/help"),
        ]
        return 404, headers, NOT_FOUND
    if path == "/moved":
        return 301, [(b"location", b"/elsewhere")], b""
    if path == "/empty":
        return 204, [], b""
    if path == "/unchanged":
        return 304, [(b"etag", b'"v1"')], b""
    return 200, [(b"content-type", b"text/plain"), (b"x-lower", b"kept")], b"hello"


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers by path (``_answer``) once the request's body is read."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    status, headers, body = _answer(scope)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
