"""What an agent's connection asks of the server that owns it.

``listener.AgentServer`` makes the connections and keeps them; ``connection.AgentConnection``
reads and answers one agent's requests. The connection names no server class: it is handed an
``Owner``, this structural type, so the two modules meet here and import each other nowhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from aiohttp import web

from proxy.edge.failures import ProxyFailure
from proxy.edge.server.limits import Limits

#: What answers a request: the proxy's pipeline.
Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]

Connection_contra = TypeVar("Connection_contra", contravariant=True)


class Owner(Protocol[Connection_contra]):
    """The server a connection belongs to: its loop, bounds and handler, the envelope of a
    request mend refuses itself, where a bug is said, and the count of its connections."""

    loop: asyncio.AbstractEventLoop
    limits: Limits
    handler: Handler

    def refuse(self, request: web.BaseRequest, failure: ProxyFailure) -> web.StreamResponse: ...

    def bug(self, exc: BaseException) -> None: ...

    def connection_made(
        self, connection: Connection_contra, transport: asyncio.Transport
    ) -> None: ...

    def connection_lost(self, connection: Connection_contra) -> None: ...
