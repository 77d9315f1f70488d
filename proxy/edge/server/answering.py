"""One request answered on an agent's connection, what it left unread dropped, and at
shutdown, its end awaited.

The handler's response is prepared and written; a handler that raises is mend's own envelope
(a bug, said once), unless a response had begun, which is cut; a response that cannot be
written ends the connection. After it, a body still arriving is read and dropped for up to
``lingering_s`` (aiohttp's and nginx's lingering close), so the agent sees the response.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiohttp import web

from proxy.edge.failures import ProxyBug, ProxyFailure
from proxy.edge.server.owner import Handler, Owner

#: the bytes of a ``100 Continue`` (``proxy/edge/agent_body.py``): any response head is more
_CONTINUE = len(b"HTTP/1.1 100 Continue\r\n\r\n")


async def answer(
    owner: Owner[Any], request: web.BaseRequest, handler: Handler, abort: Callable[[], None]
) -> web.StreamResponse | None:
    """The response, sent; ``None`` when the agent is gone or the connection must close
    (``abort`` cuts a response that had begun when its handler raised)."""
    try:
        try:
            response = await handler(request)
        except Exception as exc:  # a bug above the edge: mend's envelope, not a traceback
            owner.bug(exc)
            if request.writer.output_size > _CONTINUE:  # a response began: cut it, no other
                abort()
                return None
            response = refusal(owner, request, ProxyBug(type(exc).__name__))
        await response.prepare(request)
        await response.write_eof()
    except ConnectionError:
        return None
    except Exception as exc:  # writing the response failed (a header mend cannot send)
        owner.bug(exc)
        if request.writer.output_size == 0:
            await _last_words(owner, request, ProxyBug(type(exc).__name__))
        return None
    return response


def refusal(
    owner: Owner[Any], request: web.BaseRequest, failure: ProxyFailure
) -> web.StreamResponse:
    """The envelope of a request mend refuses itself; the connection closes after it."""
    response = owner.refuse(request, failure)
    response.force_close()
    return response


async def refused(response: web.StreamResponse) -> web.StreamResponse:
    """The handler of a refused request: its refusal, already made."""
    return response


async def _last_words(owner: Owner[Any], request: web.BaseRequest, failure: ProxyFailure) -> None:
    try:
        response = refusal(owner, request, failure)
        await response.prepare(request)
        await response.write_eof()
    except Exception as exc:  # nothing more can be said on this connection
        owner.bug(exc)


async def drained(request: web.BaseRequest, seconds: float) -> bool:
    """Whether the request's body is read to its end: what still arrives is read and dropped
    for up to ``seconds``. ``False``: the connection must close (timed out, the agent gone,
    its body broken off, or an ``Expect: 100-continue`` body not begun, which may never come).

    A body still arriving is read even when the connection closes after the response: closed
    with unread bytes, the socket resets, and an agent still sending (a 413 mid-body) gets
    ECONNRESET instead of the response.

    An upstream that answered before it had the whole body (its response released, its
    body's send cancelled: ``proxy/edge/upstream/pool.py``) leaves that send still waiting on
    the body when this begins: it lets go on its next turn of the loop, and the rest of the
    body is read here, as direct (aiohttp's reader refuses a second reader, and the connection
    used to close with the agent still sending: client-suites B4)."""
    body = request.content
    if body.is_eof():
        return True
    if request.headers.get("Expect", "").lower() == "100-continue" and body.total_bytes == 0:
        return False
    try:
        async with asyncio.timeout(seconds):
            while not body.is_eof():
                if body._waiter is not None:  # a reader cancelled, not yet unwound
                    await asyncio.sleep(0)
                    continue
                await body.readany()
    except Exception:  # timed out, the agent gone, or its body broke off
        return False
    return True


async def finish(
    task: asyncio.Task[None], request: web.BaseRequest | None, grace: float | None
) -> None:
    """Shutting down: the request running finishes within ``grace``, else it is cancelled
    (its handler first, through the request) and given ``grace`` again to unwind."""
    if task.done():
        return
    await asyncio.wait([task], timeout=grace)
    if not task.done():
        if request is not None:
            request._cancel(asyncio.CancelledError())
        task.cancel()
        await asyncio.wait([task], timeout=grace)
