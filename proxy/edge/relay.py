"""An upstream response passed to the agent: streamed as it arrives, sent in one write when
small, or read up to a cap for a rule set or a protocol to inspect.

Streams (SSE, NDJSON, any body without a length) are never held; an event stream a protocol
rewrites goes out event by event (``EventRewriter``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from structlog.typing import FilteringBoundLogger

from proxy.edge.failures import UpstreamResponseTooLarge, upstream_errors
from proxy.edge.names import spelling
from proxy.edge.passthrough import (
    Added,
    PassedResponse,
    PassedStream,
    Redirect,
    passthrough_headers,
)
from proxy.edge.upstream import Response, UpstreamError
from proxy.policy.protocols.base import Protocol
from proxy.policy.protocols.sse import EventRewriter

#: Success bodies up to this size are sent in one write when they have arrived whole with their
#: headers; a body still arriving is streamed whatever its length.
SMALL_BODY = 64 << 10
#: Set once a response's headers went to the agent: past it, a failure can only abort.
STARTED: web.RequestKey[bool] = web.RequestKey("mend.response_started", bool)
#: Seconds a passed-through body took to stream, its headers sent (paced by the two ends, not
#: mend: ``mend_processing_duration_seconds`` leaves it out).
STREAMED: web.RequestKey[float] = web.RequestKey("mend.streamed_s", float)
#: Media types whose bodies are read as they arrive, event by event, never whole.
STREAM_TYPES = frozenset(
    {
        "text/event-stream",
        "application/x-ndjson",
        "application/jsonl",
        "application/json-seq",
        "application/stream+json",
    }
)


def buffered(
    upstream: Response,
    raw: bytes,
    rid: str,
    redirect: Redirect | None = None,
    added: Added = (),
) -> web.StreamResponse:
    """The upstream's response with ``raw`` as its whole body."""
    return PassedResponse(
        status=upstream.status,
        reason=upstream.reason,
        body=raw,
        headers=passthrough_headers(upstream.headers, rid, redirect, added),
        spelt=spelling(upstream.headers),
    )


@dataclass(frozen=True, slots=True)
class Passing:
    """How one response passes: its request id, the waits and caps, and what rewrites it."""

    rid: str
    #: seconds the upstream may pause between bytes
    idle_timeout: float
    #: the most bytes a body may announce (``None``: no cap)
    limit: int | None
    log: FilteringBoundLogger
    #: an event stream's rewriter (MCP over streamable HTTP)
    events: EventRewriter | None = None
    #: a last message for a stream the upstream broke (an event answering the call)
    broken: Callable[[UpstreamError], bytes] | None = None
    #: what names mend instead of the upstream in redirect headers
    redirect: Redirect | None = None
    #: headers mend adds (``X-Mend-Attempt-Count``)
    added: Added = ()


async def stream(
    request: web.BaseRequest, upstream: Response, head: bytes, how: Passing
) -> web.StreamResponse:
    """Pass a response through as it arrives: status, end-to-end headers, bytes (``head``
    first: what was read of it already). When the upstream fails mid-stream, ``broken`` may
    give a last message (an event answering the call) to end the stream with, not an abort.

    From here on the upstream may pause up to ``idle_timeout`` between bytes (an SSE stream, a
    long-poll), not the ``read_timeout`` that bounded its headers and the body read so far.
    With ``events``, each event goes out the moment it is complete, rewritten or not.
    """
    limit, events, rid, redirect = how.limit, how.events, how.rid, how.redirect
    upstream.idle(how.idle_timeout)
    if limit is not None and (upstream.content_length or 0) > limit:
        raise UpstreamResponseTooLarge(f"Content-Length {upstream.content_length} > {limit}")
    length = upstream.content_length
    if (
        not head
        and length is not None
        and length <= SMALL_BODY
        and request.method != "HEAD"
        and upstream.status not in (204, 304)
    ):
        # one write for headers and body instead of three when the whole body is here already,
        # as most API answers are; one still arriving streams from what came (never waited for)
        with upstream_errors():
            head = upstream.read_nowait()
        if upstream.at_eof():
            if events is not None:
                head = await events.feed(head) + events.close()
            return buffered(upstream, head, rid, redirect, how.added)
    response = PassedStream(
        status=upstream.status,
        reason=upstream.reason,
        headers=passthrough_headers(upstream.headers, rid, redirect, how.added),
        spelt=spelling(upstream.headers),
    )
    await response.prepare(request)
    request[STARTED] = True
    began = time.perf_counter()
    try:
        return await _relay(request, upstream, response, head, how)
    finally:
        request[STREAMED] = time.perf_counter() - began


async def _relay(
    request: web.BaseRequest,
    upstream: Response,
    response: web.StreamResponse,
    head: bytes,
    how: Passing,
) -> web.StreamResponse:
    """The body, as it arrives, after the headers went out."""
    events, broken = how.events, how.broken
    if head and events is not None:
        head = await events.feed(head)  # read before it was known to be still arriving
    if head:
        await response.write(head)
    try:
        while chunk := await upstream.read():
            if events is not None:
                chunk = await events.feed(chunk)
                if not chunk:
                    continue
            await response.write(chunk)
        if events is not None and (rest := events.close()):
            await response.write(rest)
    except UpstreamError as exc:  # the agent hanging up (a write failing) raises on: a 499
        # headers are gone already: the only honest signals left are a last event saying so
        # (an event stream whose call was not answered) or an aborted connection
        how.log.warning("upstream_stream_broken", request_id=how.rid, error=type(exc).__name__)
        last = broken(exc) if broken is not None else b""
        if last:
            try:
                await response.write(last)
                await response.write_eof()
                return response
            except ConnectionError:
                pass
        if request.transport is not None:
            request.transport.abort()
        return response
    await response.write_eof()
    return response


async def read_capped(
    upstream: Response, limit: int, deadline_s: float, *, give_up: bool = False
) -> tuple[bytes, bool]:
    """The body if it has at most ``limit`` bytes, else its first ``limit + 1`` bytes, and
    whether that was the whole body; within ``deadline_s``: an upstream dripping a byte a
    second resets every per-read timer, not this one. With ``give_up``, a body still
    arriving at the deadline is not an error: what came so far is returned, not whole."""
    buf = bytearray()
    with upstream_errors():
        try:
            async with asyncio.timeout(deadline_s):
                while len(buf) <= limit:
                    chunk = await upstream.read(limit + 1 - len(buf))
                    if not chunk:
                        return bytes(buf), True
                    buf += chunk
        except TimeoutError:
            if not give_up:
                raise
    return bytes(buf), False  # all of it: a success streams on from here, byte for byte


def is_stream(upstream: Response) -> bool:
    """A response that may never end or may pause: no length, or a streaming media type."""
    return upstream.content_length is None or upstream.content_type in STREAM_TYPES


def may_hold_errors(protocol: Protocol | None, upstream: Response, raw: bytes) -> bool:
    """Whether a success read for inspection may hold an error: a protocol's cheap scan says so
    (a compressed body cannot be scanned); a REST success is for its rules to say."""
    if protocol is None or upstream.headers.get("Content-Encoding"):
        return True
    return protocol.may_hold_errors(raw)
