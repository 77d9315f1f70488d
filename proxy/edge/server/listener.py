"""The agent port's server: its connections counted and capped, bound, drained at shutdown.

At ``max_connections`` (optionally per client address) the longest-idle keep-alive connection
(one that served a request and waits for the next) is closed to make room, as nginx does when
it runs short; only when none is idle is a connection past the cap answered with a 503 envelope
at its first request and closed, never left waiting.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections import Counter
from collections.abc import Callable

from aiohttp import web
from structlog.typing import FilteringBoundLogger

from proxy.edge.failures import ProxyFailure, TooManyConnections
from proxy.edge.server.connection import AgentConnection
from proxy.edge.server.limits import Limits
from proxy.edge.server.owner import Handler

#: Builds, logs and counts the envelope response for a request mend refuses itself.
Refuser = Callable[[web.BaseRequest, ProxyFailure], web.StreamResponse]


class AgentServer:
    """Makes an ``AgentConnection`` for each accepted socket (a protocol factory) and keeps them
    until they close."""

    def __init__(
        self,
        handler: Handler,
        *,
        refuse: Refuser,
        limits: Limits,
        max_connections: int,
        max_per_client: int | None,
        log: FilteringBoundLogger,
        on_idle_closed: Callable[[], None] = lambda: None,
    ) -> None:
        self.handler, self.refuse, self.limits, self.log = handler, refuse, limits, log
        self.max_connections, self.max_per_client = max_connections, max_per_client
        #: called for each idle keep-alive connection closed to make room at the cap
        self.on_idle_closed = on_idle_closed
        self.connections: dict[AgentConnection, str] = {}
        self.per_client: Counter[str] = Counter()
        self.loop = asyncio.get_running_loop()

    def __call__(self) -> AgentConnection:
        return AgentConnection(self)

    def bug(self, exc: BaseException) -> None:
        """A handler raised, or a response could not be written: said once, with its type."""
        self.log.error("request_handler_failed", error=repr(exc)[:500])

    def connection_made(self, connection: AgentConnection, transport: asyncio.Transport) -> None:
        client = _client(transport)
        self.connections[connection] = client
        self.per_client[client] += 1
        over = len(self.connections) > self.max_connections and not self._make_room(connection)
        connection.over_limit = over or (
            self.max_per_client is not None and self.per_client[client] > self.max_per_client
        )

    def connection_lost(self, connection: AgentConnection) -> None:
        client = self.connections.pop(connection, None)
        if client is not None:
            self.per_client[client] -= 1
            if self.per_client[client] <= 0:
                del self.per_client[client]

    def _make_room(self, new: AgentConnection) -> bool:
        """Close the longest-idle keep-alive connection for ``new``; whether one was."""
        oldest: AgentConnection | None = None
        oldest_until = 0.0
        for other in self.connections:
            idle = other.served and other.is_idle and other is not new
            until = other.deadlines.idle_until if idle else None
            if until is not None and (oldest is None or until < oldest_until):
                oldest, oldest_until = other, until
        if oldest is None:
            return False
        oldest.force_close()  # its connection_lost follows from the loop, and frees its place
        self.on_idle_closed()
        return True

    def too_many(self, request: web.BaseRequest) -> web.StreamResponse | None:
        """The 503 envelope for a request on a connection past the cap, else None."""
        protocol = request.protocol
        if isinstance(protocol, AgentConnection) and protocol.over_limit:
            response = self.refuse(request, TooManyConnections("connection limit reached"))
            response.force_close()
            return response
        return None

    def pre_shutdown(self) -> None:
        """No new request on any connection; idle ones close now."""
        for connection in list(self.connections):
            connection.close_idle()

    async def shutdown(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Requests running finish within ``timeout``, then every connection is closed."""
        await asyncio.gather(*(c.shutdown(timeout) for c in list(self.connections)))


class Listener:
    """The agent server bound to its sockets; ``close`` stops accepting, then drains."""

    def __init__(self, server: AgentServer, shutdown_timeout: float) -> None:
        self.server, self.shutdown_timeout = server, shutdown_timeout
        self.bound: list[asyncio.Server] = []

    async def listen(
        self,
        host: str | None,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        reuse_port: bool = False,
    ) -> asyncio.Server:
        bound = await self.server.loop.create_server(
            self.server, host, port, ssl=ssl_context, backlog=1024, reuse_port=reuse_port or None
        )
        self.bound.append(bound)
        return bound

    async def adopt(self, sock: socket.socket, ssl_context: ssl.SSLContext | None = None) -> None:
        """Serve on a socket already bound (tests bind a free port first)."""
        bound = await self.server.loop.create_server(
            self.server, sock=sock, ssl=ssl_context, backlog=1024
        )
        self.bound.append(bound)

    async def close(self) -> None:
        for bound in self.bound:
            bound.close()
        self.bound.clear()
        await asyncio.sleep(0)  # requests accepted just now begin before idle ones are closed
        self.server.pre_shutdown()
        await self.server.shutdown(self.shutdown_timeout)


def _client(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
