"""Forwarding: headers in both directions and the pooled upstream sessions.

Hop-by-hop headers (RFC 9110 §7.6.1) belong to one connection and are dropped both ways, with any
header the ``Connection`` header names. Bodies are never buffered here: the request body streams
from the agent's connection to the upstream's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp.connector import Connection
from multidict import CIMultiDict, CIMultiDictProxy

from proxy.edge.failures import UpstreamProtocolError
from proxy.edge.rawhead import install_for_clients

if TYPE_CHECKING:
    from proxy.config.certificates import ClientTLS

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
    # Expect is answered by mend itself (``proxy/edge/agent_body.py``), as Envoy and nginx do
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


#: While a response's head is awaited, the parser is fed this many bytes at a time.
_HEAD_SLICE = 4096


class _HeadGuard:
    """Stands in for a connection's response parser until a final (non-1xx) head is parsed.

    aiohttp parses every interim (1xx) response an upstream sends and skips them in a loop, for as
    many as arrive: a storm of them is parsed a whole socket read at a time (~10,000 heads, 0.6 s
    of CPU with the event loop held), and a slow one keeps the request waiting forever. Here the
    head is parsed in slices; past ``limit`` interim responses the response fails before the
    rest is parsed, and the first one starts ``window_s`` for the final head. A response whose
    first bytes are already a final status line is parsed as it comes, and no timer is set unless
    an interim response arrives: the guard costs a request only when a 1xx comes (issue 29).
    """

    __slots__ = (
        "_cancelling",
        "_expired",
        "_task",
        "_timer",
        "count",
        "final",
        "limit",
        "parser",
        "window_s",
    )

    def __init__(self, parser: Any, limit: int, window_s: float) -> None:
        self.parser, self.limit, self.window_s = parser, limit, window_s
        self.count = 0
        self.final = False
        #: as ``asyncio.timeout``: the task to cancel, and its cancellations already pending
        task = asyncio.current_task()
        self._task = task
        self._cancelling = task.cancelling() if task is not None else 0
        self._timer: asyncio.TimerHandle | None = None
        self._expired = False

    def feed_data(self, data: bytes) -> tuple[list[Any], bool, bytes]:
        if self.final:
            return self.parser.feed_data(data)  # type: ignore[no-any-return]
        if data[:7] == b"HTTP/1." and len(data) > 9 and data[8] == 0x20 and 0x32 <= data[9] <= 0x39:
            # "HTTP/1.x 2xx" to "9xx" first: a final head, nothing to slice or time
            self.final = True
            return self.parser.feed_data(data)  # type: ignore[no-any-return]
        messages: list[Any] = []
        for start in range(0, len(data), _HEAD_SLICE):
            piece = data[start : start + _HEAD_SLICE]
            parsed, upgraded, tail = self.parser.feed_data(piece)
            self._check(parsed)
            messages.extend(parsed)
            rest = data[start + _HEAD_SLICE :]
            if upgraded:
                return messages, upgraded, tail + rest
            if self.final and rest:
                parsed, upgraded, tail = self.parser.feed_data(rest)
                return [*messages, *parsed], upgraded, tail
        return messages, False, b""

    def _check(self, parsed: list[Any]) -> None:
        for message, _ in parsed:
            if 100 <= message.code < 200 and message.code != 101:
                self.count += 1
                if self.count == 1:
                    self._arm()
                if self.count > self.limit:
                    raise UpstreamProtocolError(f"more than {self.limit} interim (1xx) responses")
            else:
                self.final = True

    def _arm(self) -> None:
        """The first interim response: the final head is due within ``window_s``."""
        if self._task is not None:
            self._timer = self._task.get_loop().call_later(self.window_s, self._expire)

    def _expire(self) -> None:
        self._timer = None
        if self._task is not None:
            self._expired = True
            self._task.cancel()

    def settle(self) -> bool:
        """Stop the timer; whether it fired and the task's cancellation was its own (then the
        wait timed out, as ``asyncio.timeout`` decides). Only the first call can say so."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._expired or self._task is None:
            return False
        self._expired = False
        return self._task.uncancel() <= self._cancelling

    def __getattr__(self, name: str) -> Any:
        return getattr(self.parser, name)


def interim_limited(limit: int, window_s: float) -> type[aiohttp.ClientResponse]:
    """A response class whose head accepts at most ``limit`` interim responses, and a final head
    at most ``window_s`` after the first of them (see ``_HeadGuard``)."""

    class InterimLimitedResponse(aiohttp.ClientResponse):
        async def start(self, connection: Connection) -> aiohttp.ClientResponse:
            # aiohttp has no hook for this: its protocol's parser, made anew for each request,
            # is wrapped until this response's head is in
            protocol: Any = connection.protocol
            if protocol is None or getattr(protocol, "_parser", None) is None:
                return await super().start(connection)
            guard = _HeadGuard(protocol._parser, limit, window_s)
            protocol._parser = guard
            try:
                return await super().start(connection)
            except asyncio.CancelledError as exc:
                if guard.settle():
                    raise TimeoutError from exc
                raise
            finally:
                guard.settle()
                if protocol._parser is guard:
                    protocol._parser = guard.parser

    return InterimLimitedResponse


def _named_request(server_name: str) -> type[VerbatimRequest]:
    """A request class that sends ``server_name`` in SNI and checks it in the upstream's
    certificate: aiohttp's ``server_hostname``, which is per request, given on every one."""

    class NamedRequest(VerbatimRequest):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["server_hostname"] = server_name
            super().__init__(*args, **kwargs)

    return NamedRequest


@dataclass
class Upstreams:
    """One ``ClientSession`` (one connection pool) per route, created lazily.

    Sessions have no ``base_url``: the proxy passes absolute URLs built from the route's
    configured origin (``proxy/edge/target.py``), so no request target can name another host. A
    route with a ``tls:`` block connects with its own context (``proxy/edge/tls.py``); others with
    aiohttp's default, the system's CAs.
    """

    max_interim_responses: int = 8
    #: by route name: the TLS context and server name of each route with a ``tls:`` block
    tls: dict[str, ClientTLS] = field(default_factory=dict)
    _sessions: dict[str, aiohttp.ClientSession] = field(default_factory=dict)

    def __post_init__(self) -> None:
        install_for_clients()  # request header bytes that are not UTF-8 pass as sent

    def session(self, route: str, read_timeout: float) -> aiohttp.ClientSession:
        session = self._sessions.get(route)
        if session is None:
            tls = self.tls.get(route)
            connector = aiohttp.TCPConnector(
                limit=0,
                ttl_dns_cache=60,
                enable_cleanup_closed=True,
                ssl=True if tls is None else tls.context,
            )
            request_class = VerbatimRequest
            if tls is not None and tls.server_name is not None:
                request_class = _named_request(tls.server_name)
            session = aiohttp.ClientSession(
                connector=connector,
                # bytes pass through as the upstream sent them; error bodies are decoded by us
                auto_decompress=False,
                request_class=request_class,
                response_class=interim_limited(self.max_interim_responses, read_timeout),
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
            )
            self._sessions[route] = session
        return session

    def adopt(self, previous: Upstreams, route: str) -> None:
        """Take over ``previous``' pool for ``route``, if it has one (a reload kept the route's
        connections as they were): its connections stay warm, and closing ``previous`` leaves
        it open."""
        session = previous._sessions.pop(route, None)
        if session is not None:
            self._sessions.setdefault(route, session)

    async def close(self) -> None:
        sessions = list(self._sessions.values())
        self._sessions.clear()
        for session in sessions:
            await session.close()
