"""Forwarding: headers in both directions and the pooled upstream sessions.

Hop-by-hop headers (RFC 9110 §7.6.1) belong to one connection and are dropped both ways, with any
header the ``Connection`` header names. Bodies are never buffered here: the request body streams
from the agent's connection to the upstream's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp.connector import Connection
from multidict import CIMultiDict, CIMultiDictProxy

from proxy.failures import UpstreamProtocolError, UpstreamTimeout

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)


def end_to_end(headers: CIMultiDictProxy[str], drop: Iterable[str] = ()) -> CIMultiDict[str]:
    """``headers`` less hop-by-hop ones, those ``Connection`` names, and ``drop``."""
    # copy then delete: the copy runs in C, and most messages carry none of these names, so this
    # is several times cheaper than filtering every header through Python
    out = CIMultiDict(headers)
    for value in headers.getall("Connection", ()):
        for token in value.split(","):
            if token := token.strip():
                out.popall(token, None)
    for name in HOP_BY_HOP:
        out.popall(name, None)
    for name in drop:
        out.popall(name, None)
    return out


def upstream_request_headers(
    headers: CIMultiDictProxy[str],
    *,
    request_id: str,
    client_ip: str | None,
    scheme: str,
    host: str | None,
    upstream_host: str | None,
    preserve_host: bool,
) -> CIMultiDict[str]:
    out = end_to_end(headers, drop=() if preserve_host else ("host",))
    if client_ip:
        prior = out.get("X-Forwarded-For")
        out["X-Forwarded-For"] = f"{prior}, {client_ip}" if prior else client_ip
    out.setdefault("X-Forwarded-Proto", scheme)
    if host:
        out.setdefault("X-Forwarded-Host", host)
    out["X-Request-ID"] = request_id
    if not preserve_host and upstream_host:
        out["Host"] = upstream_host
    return out


#: Every header aiohttp would add on its own; the agent's request goes upstream without them.
_NEVER_ADDED: CIMultiDict[None] = CIMultiDict(
    (name, None) for name in ("Accept", "Accept-Encoding", "Content-Type", "User-Agent")
)


class VerbatimRequest(aiohttp.ClientRequest):
    """An upstream request carrying the agent's headers and none of aiohttp's defaults.

    ``skip_auto_headers`` would do the same, but builds and merges a header dict on every
    request (about 4 % of a proxied request's time), and still adds ``Accept: */*``.
    """

    def update_auto_headers(self, skip_auto_headers: Iterable[str] | None) -> None:
        self._skip_auto_headers = _NEVER_ADDED


class _InterimLimit:
    """``protocol.read`` for one response's head: counts 1xx interim responses.

    aiohttp skips interim responses in a loop that never yields while they are buffered, for as
    many as the upstream sends: a 1xx storm held the event loop (p99 of other requests 0.8 s) and
    a slow one kept a request waiting forever. Past ``limit`` of them, or ``window_s`` after the
    first, the response fails; between two of them, other requests run.
    """

    __slots__ = ("count", "deadline", "limit", "loop", "read", "window_s")

    def __init__(self, read: Callable[[], Awaitable[Any]], limit: int, window_s: float) -> None:
        self.read, self.limit, self.window_s = read, limit, window_s
        self.loop = asyncio.get_running_loop()
        self.count = 0
        self.deadline = 0.0

    async def __call__(self) -> Any:
        message, payload = await self.read()
        if 100 <= message.code < 200 and message.code != 101:
            self.count += 1
            now = self.loop.time()
            if self.count == 1:
                self.deadline = now + self.window_s
            if self.count > self.limit:
                raise UpstreamProtocolError(f"more than {self.limit} interim (1xx) responses")
            if now > self.deadline:
                raise UpstreamTimeout(f"no final response {self.window_s:g} s after a 1xx")
            await asyncio.sleep(0)
        return message, payload


def interim_limited(limit: int, window_s: float) -> type[aiohttp.ClientResponse]:
    """A response class whose head accepts at most ``limit`` interim responses (see above)."""

    class InterimLimitedResponse(aiohttp.ClientResponse):
        async def start(self, connection: Connection) -> aiohttp.ClientResponse:
            protocol = connection.protocol
            if protocol is None:
                return await super().start(connection)
            # shadow the bound method on this (pooled) protocol for this response's head only
            protocol.read = _InterimLimit(protocol.read, limit, window_s)  # type: ignore[method-assign]
            try:
                return await super().start(connection)
            finally:
                del protocol.read

    return InterimLimitedResponse


@dataclass
class Upstreams:
    """One ``ClientSession`` (one connection pool) per route, created lazily.

    Sessions have no ``base_url``: the proxy passes absolute URLs built from the route's
    configured origin (``proxy/target.py``), so no request target can name another host.
    """

    max_interim_responses: int = 8
    _sessions: dict[str, aiohttp.ClientSession] = field(default_factory=dict)

    def session(self, route: str, read_timeout: float) -> aiohttp.ClientSession:
        session = self._sessions.get(route)
        if session is None:
            connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=60, enable_cleanup_closed=True)
            session = aiohttp.ClientSession(
                connector=connector,
                # bytes pass through as the upstream sent them; error bodies are decoded by us
                auto_decompress=False,
                request_class=VerbatimRequest,
                response_class=interim_limited(self.max_interim_responses, read_timeout),
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
            )
            self._sessions[route] = session
        return session

    async def close(self) -> None:
        for session in self._sessions.values():
            await session.close()
        self._sessions.clear()
