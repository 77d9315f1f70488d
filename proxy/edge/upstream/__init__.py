"""mend's HTTP/1.1 client to upstreams: llhttp (``httptools``) under asyncio Protocols, pooled.

Why its own: aiohttp's client re-sent idempotent requests after a reset, and cost about a third
of a proxied request's instructions (issue 29); llhttp is the parser of Node and uvicorn.

- ``errors``: the one family of exceptions it raises (``proxy/edge/failures.py`` translates it);
- ``head``: the request head, byte-exact, and chunked framing;
- ``limits``: what an upstream may send;
- ``connection``: one connection and its exchange (parser callbacks, backpressure);
- ``response``: the response a caller reads, its body as it arrives;
- ``pool``: keep-alive connections to one origin, and sending a request (never twice).
"""

from proxy.edge.upstream.connection import Connection
from proxy.edge.upstream.errors import (
    ConnectError,
    ConnectTimeout,
    Disconnected,
    ProtocolError,
    ReadTimeout,
    RequestBodyFailed,
    UpstreamError,
)
from proxy.edge.upstream.limits import Limits
from proxy.edge.upstream.pool import Pool, Timeouts, default_tls
from proxy.edge.upstream.response import Response

__all__ = [
    "ConnectError",
    "ConnectTimeout",
    "Connection",
    "Disconnected",
    "Limits",
    "Pool",
    "ProtocolError",
    "ReadTimeout",
    "RequestBodyFailed",
    "Response",
    "Timeouts",
    "UpstreamError",
    "default_tls",
]
