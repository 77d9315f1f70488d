"""Forwarding: headers in both directions and the pooled upstream sessions.

Hop-by-hop headers (RFC 9110 §7.6.1) belong to one connection and are dropped both ways, with any
header the ``Connection`` header names. Bodies are never buffered here: the request body streams
from the agent's connection to the upstream's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

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


def _connection_named(headers: CIMultiDictProxy[str]) -> frozenset[str]:
    named = headers.getall("Connection", ())
    if not named:
        return frozenset()
    return frozenset(t.strip().lower() for value in named for t in value.split(",") if t.strip())


def end_to_end(headers: CIMultiDictProxy[str], drop: Iterable[str] = ()) -> CIMultiDict[str]:
    """``headers`` less hop-by-hop ones, those ``Connection`` names, and ``drop``."""
    excluded = HOP_BY_HOP | _connection_named(headers) | frozenset(drop)
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in excluded)


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


@dataclass
class Upstreams:
    """One ``ClientSession`` (one connection pool) per upstream origin, created lazily."""

    limit_per_host: int = 0
    _sessions: dict[str, aiohttp.ClientSession] = field(default_factory=dict)

    def session(self, origin: str) -> aiohttp.ClientSession:
        session = self._sessions.get(origin)
        if session is None:
            connector = aiohttp.TCPConnector(
                limit=0,
                limit_per_host=self.limit_per_host,
                ttl_dns_cache=60,
                enable_cleanup_closed=True,
            )
            session = aiohttp.ClientSession(
                base_url=URL(origin),
                connector=connector,
                # bytes pass through as the upstream sent them; error bodies are decoded by us
                auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
            )
            self._sessions[origin] = session
        return session

    async def close(self) -> None:
        for session in self._sessions.values():
            await session.close()
        self._sessions.clear()
