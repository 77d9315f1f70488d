"""The agent's request body, as mend reads it: size, ``Expect: 100-continue``, pace.

A body is read as it arrives and streamed upstream; it is bounded by ``request_body_max_bytes``
(413 before a byte is read when ``Content-Length`` says so), by ``client_body_timeout`` between
two reads, and by ``client_body_min_rate`` once its first seconds have passed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from aiohttp import web

from proxy.config.settings import Settings
from proxy.edge.failures import RequestTimeout, RequestTooLarge
from proxy.policy.protocols.base import Call

#: Seconds a request body may take before ``client_body_min_rate`` applies (Kestrel's grace).
BODY_RATE_GRACE_S = 5.0


def check_size(request: web.BaseRequest, settings: Settings) -> None:
    """``RequestTooLarge`` when the request's ``Content-Length`` is over the limit."""
    limit = settings.request_body_max_bytes
    length = request.content_length
    if limit is not None and length is not None and length > limit:
        raise RequestTooLarge(f"Content-Length {length} > {limit}", limit=limit)


async def body(
    request: web.BaseRequest, settings: Settings, call: Call | None
) -> AsyncIterator[bytes]:
    """The agent's body as it arrives: a pause over ``client_body_timeout`` or more than
    ``request_body_max_bytes`` ends it (and with it the upstream request it was feeding).

    ``Expect: 100-continue`` is answered here, when the body is first wanted, as Envoy does by
    default and nginx when it starts reading: the agent never stalls on a 100 the upstream
    may never send (``Expect`` is not forwarded), and a request refused before its body is
    needed (413, 404, 400) is refused without the agent sending it.

    A ``call`` keeps a copy of the first bytes as they pass (``Call.feed``), for its protocol.
    """
    limit = settings.request_body_max_bytes
    idle = settings.client_body_timeout
    rate = settings.client_body_min_rate
    content = request.content
    seen = 0
    if expects_continue(request):
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    began = time.monotonic()
    while True:
        try:
            async with asyncio.timeout(idle):
                chunk = await content.readany()
        except TimeoutError:
            raise RequestTimeout(f"no request body byte for {idle:g} s") from None
        if not chunk:
            if call is not None:
                call.end()
            return
        seen += len(chunk)
        if limit is not None and seen > limit:
            raise RequestTooLarge(f"body over {limit} bytes", limit=limit)
        elapsed = time.monotonic() - began
        if rate is not None and elapsed > BODY_RATE_GRACE_S and seen < rate * elapsed:
            raise RequestTimeout(f"request body slower than {rate} bytes/s")
        if call is not None:
            call.feed(chunk)
        yield chunk


async def read_rest(request: web.BaseRequest, call: Call, wait_s: float) -> None:
    """The body of a call that failed before it went upstream (the upstream was unreachable),
    read up to the call's cap within ``wait_s``: its JSON-RPC ids are what the answer must
    carry. A body already partly sent, or awaiting a ``100 Continue``, is left alone."""
    if call.tee is None or call.ended or call.seen or expects_continue(request):
        return
    try:
        async with asyncio.timeout(wait_s):
            while call.seen <= call.cap:
                chunk = await request.content.readany()
                if not chunk:
                    call.end()
                    return
                call.feed(chunk)
    except (TimeoutError, OSError):
        return


def expects_continue(request: web.BaseRequest) -> bool:
    expect = request.headers.get("Expect")
    return expect is not None and expect.lower() == "100-continue" and request.version >= (1, 1)
