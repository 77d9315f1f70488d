"""Forwarding: headers in both directions and the upstream connection pools.

Hop-by-hop headers (RFC 9110 §7.6.1) belong to one connection and are dropped both ways, with any
header the ``Connection`` header names. Bodies are never buffered here: the request body streams
from the agent's connection to the upstream's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from multidict import CIMultiDict, CIMultiDictProxy

from proxy.edge.upstream import Limits, Pool, default_tls

if TYPE_CHECKING:
    from proxy.config.certificates import ClientTLS
    from proxy.edge.target import Origin

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


def wants_upgrade(headers: CIMultiDictProxy[str]) -> bool:
    """Whether a request asks to switch its connection to WebSocket: ``Upgrade: websocket`` with
    ``upgrade`` among the ``Connection`` tokens. Only this upgrade is forwarded (and relayed, see
    ``proxy/edge/tunnel.py``): aiohttp's server hands the bytes after a request's head to a tunnel
    for
    ``websocket`` alone, and would parse another protocol's (``h2c``) as HTTP; other ``Upgrade``
    headers are dropped as hop-by-hop, and the upstream answers the request as plain HTTP."""
    if headers.get("Upgrade", "").strip().lower() != "websocket":
        return False
    tokens = ",".join(headers.getall("Connection", ())).lower().split(",")
    return "upgrade" in (token.strip() for token in tokens)


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
    # Expect is answered by mend itself (``Proxy._body``), as Envoy and nginx do
    out = end_to_end(headers, drop=("expect",) if preserve_host else ("host", "expect"))
    if client_ip:
        prior = out.get("X-Forwarded-For")
        out["X-Forwarded-For"] = f"{prior}, {client_ip}" if prior else client_ip
    out.setdefault("X-Forwarded-Proto", scheme)
    if host:
        out.setdefault("X-Forwarded-Host", host)
    out["X-Request-ID"] = request_id
    if not preserve_host and upstream_host:
        out["Host"] = upstream_host
    if wants_upgrade(headers):  # the hop-by-hop pair a WebSocket handshake needs on this hop too
        out["Upgrade"] = headers["Upgrade"]
        out["Connection"] = "Upgrade"
    return out


@dataclass
class Upstreams:
    """One connection pool (``proxy/edge/upstream``) per route, created lazily.

    A pool is bound to its route's origin: requests name only a target appended to the origin's
    base path (``proxy/edge/target.py``), so no request target can name another host. A route
    with a ``tls:`` block connects with its own context (``proxy/config/certificates.py``) and
    server name; other ``https://`` routes with the system's CAs.
    """

    max_interim_responses: int = 8
    #: by route name: the TLS context and server name of each route with a ``tls:`` block
    tls: dict[str, ClientTLS] = field(default_factory=dict)
    _pools: dict[str, Pool] = field(default_factory=dict)

    def pool(self, route: str, origin: Origin) -> Pool:
        pool = self._pools.get(route)
        if pool is None:
            https = origin.scheme in ("https", "wss")
            tls = self.tls.get(route)
            context = (tls.context if tls is not None else default_tls()) if https else None
            port = origin.port or (443 if https else 80)
            host = f"[{origin.host}]" if ":" in origin.host else origin.host
            pool = Pool(
                origin.host,
                port,
                base_path=origin.base_path,
                host_header=host if origin.port is None else f"{host}:{port}",
                tls=context,
                server_name=tls.server_name if tls is not None else None,
                limits=Limits(max_interim=self.max_interim_responses),
            )
            self._pools[route] = pool
        return pool

    def adopt(self, previous: Upstreams, route: str) -> None:
        """Take over ``previous``' pool for ``route``, if it has one (a reload kept the route's
        connections as they were): its connections stay warm, and closing ``previous`` leaves
        it open."""
        pool = previous._pools.pop(route, None)
        if pool is not None:
            self._pools.setdefault(route, pool)

    async def close(self) -> None:
        pools = list(self._pools.values())
        self._pools.clear()
        for pool in pools:
            await pool.close()
