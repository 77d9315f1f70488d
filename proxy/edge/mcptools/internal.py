"""A tool call's HTTP request run through the proxy in-process, as an agent's would be.

The request is a real ``aiohttp.web.BaseRequest`` that stands on no connection: its body is fed
whole, and what the proxy writes (``Proxy.handle``, unchanged: route, rules, redaction, metrics,
log line, cross-call view) is captured, up to a cap, instead of sent. No socket, no second
listener, no TLS to mend itself, and each ``--workers`` process answers its own tools.

Two request keys are the whole interface with the proxy: ``REFUSED`` (a failure decided before
any request could be made: an unknown tool; the proxy answers it as its own failure) and
``ENVELOPE`` (the envelope the proxy answered with, set by ``envelope_steps.Reply``), beside
the gate's ``PRESET`` (violations of the arguments that HTTP cannot carry).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http import HttpVersion11, RawRequestMessage
from aiohttp.streams import EMPTY_PAYLOAD, StreamReader
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from proxy.edge.failures import ProxyFailure
from proxy.policy.envelope.model import Envelope

REFUSED: web.RequestKey[ProxyFailure] = web.RequestKey("mend.tool_refused", ProxyFailure)
ENVELOPE: web.RequestKey[Envelope] = web.RequestKey("mend.envelope", Envelope)

Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class Answer:
    """What the proxy answered an in-process request."""

    status: int
    headers: CIMultiDict[str]
    body: bytes
    envelope: Envelope | None
    over: bool  # the body was longer than the cap: ``body`` is its start


class _Detached:
    """The connection an in-process request stands on: none. ``BaseRequest`` and its body's
    ``StreamReader`` ask these of a connection; a body is fed whole, so reading never pauses."""

    transport = None
    ssl_context = None
    peername = None
    sockname = None
    max_field_size = 8190
    max_headers = 128
    connected = True
    _reading_paused = False

    def pause_reading(self) -> None:
        return None

    def resume_reading(self, resume_parser: bool = True) -> None:
        return None


class _Capture(AbstractStreamWriter):
    """The response the proxy writes, kept in memory up to ``limit`` bytes of body; past
    them the writer fails as a closed connection does."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.status = 0
        self.headers: CIMultiDict[str] = CIMultiDict()
        self.body = bytearray()
        self.over = False

    async def write(self, chunk: bytes | bytearray | memoryview) -> None:
        if len(self.body) + len(chunk) > self.limit:
            self.over = True
            self.body.extend(bytes(chunk)[: self.limit - len(self.body)])
            # as an agent that hung up: the proxy stops reading the upstream (a stream that
            # never ends would otherwise hold the call until the route's idle_timeout)
            raise ConnectionResetError("the tool's answer is over its cap")
        self.body.extend(chunk)

    async def write_eof(self, chunk: bytes = b"") -> None:
        if chunk:
            await self.write(chunk)

    async def drain(self) -> None:
        return None

    def enable_compression(self, encoding: str = "deflate", strategy: int | None = None) -> None:
        return None

    def enable_chunking(self) -> None:
        return None

    async def write_headers(self, status_line: str, headers: CIMultiDict[str]) -> None:
        self.status = int(status_line.split(" ", 2)[1])
        self.headers = CIMultiDict(headers)


@dataclass(frozen=True, slots=True)
class InternalRequest:
    """A request made in-process, and the agent connection it is made on behalf of."""

    method: str
    target: str
    headers: CIMultiDict[str]
    body: bytes | None
    #: the agent's address, scheme and ``Host``, as its own request had them
    remote: str | None
    scheme: str
    host: str


async def run(
    handler: Handler,
    call: InternalRequest,
    *,
    limit: int,
    state: dict[Any, Any] | None = None,
) -> Answer:
    """``handler``'s answer to ``call`` (its method, target, headers and body); the body kept is
    at most ``limit`` bytes."""
    method, target, headers, body = call.method, call.target, call.headers, call.body
    loop = asyncio.get_running_loop()
    protocol: Any = _Detached()
    if body is not None:
        headers["Content-Length"] = str(len(body))
        payload = StreamReader(protocol, max(len(body), 1 << 16), loop=loop)
        payload.feed_data(body)
        payload.feed_eof()
    else:
        payload = EMPTY_PAYLOAD
    raw_headers = tuple(
        (k.encode("utf-8", "surrogateescape"), v.encode("utf-8", "surrogateescape"))
        for k, v in headers.items()
    )
    message = RawRequestMessage(
        method,
        target,
        HttpVersion11,
        CIMultiDictProxy(headers),
        raw_headers,
        False,  # should_close
        None,  # compression
        False,  # upgrade
        False,  # chunked
        URL(target, encoded=True),
    )
    writer = _Capture(limit)
    task = cast("asyncio.Task[None]", asyncio.current_task())
    request = web.BaseRequest(
        message,
        payload,
        protocol,
        writer,
        task,
        loop,
        scheme=call.scheme,
        host=call.host,
        remote=call.remote,
    )
    for key, value in (state or {}).items():
        request[key] = value
    await handler(request)
    return Answer(
        writer.status, writer.headers, bytes(writer.body), request.get(ENVELOPE), writer.over
    )
