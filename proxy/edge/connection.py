"""An agent's HTTP/1 connection: how long it may take, how many there may be, what it may send.

aiohttp's ``RequestHandler`` parses and runs requests; this subclass adds what nginx and Envoy
bound by default and aiohttp does not:

- a **header timeout** (nginx ``client_header_timeout``): from the first byte of a request head to
  its last; a client dripping its headers is disconnected, whatever the keep-alive timer says;
- a **connection cap** (``max_connections``, optionally per client address): at the cap the
  longest-idle keep-alive connection (one that has served a request and waits for the next) is
  closed to make room, as nginx does when it runs short; only when none is idle is a connection
  past the cap answered with a 503 envelope at its first request and closed, never left waiting;
- **envelopes for requests mend refuses itself**: aiohttp answers a malformed request, an
  over-long request line or too many headers with a plain-text 400; here they get the agent's
  envelope (414, 431, 400) through ``Refuser``, with a request id and one JSON log line.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong

from proxy.edge.failures import (
    HeadersTooLarge,
    MalformedRequest,
    ProxyBug,
    ProxyFailure,
    TooManyConnections,
    UriTooLong,
)

#: Builds, logs and counts the envelope response for a request mend refuses itself.
Refuser = Callable[[web.BaseRequest, ProxyFailure], web.StreamResponse]


def parse_failure(exc: BaseException | None, status: int, max_line: int) -> ProxyFailure:
    """The failure behind aiohttp's ``handle_error(status, exc)`` for a request it could not
    parse (or, for 5xx, a handler that raised: mend's own bug)."""
    if status >= 500:
        return ProxyBug(type(exc).__name__ if exc else "handler error")
    if isinstance(exc, LineTooLong):
        # the request line's limit is max_line_size, a header's max_field_size; the parser
        # raises the same exception for both, naming the start of the offending line
        line, limit = exc.args[0], exc.args[1]
        text = bytes(line).decode("latin-1") if isinstance(line, bytes | bytearray) else str(line)
        is_target = limit == max_line and text.startswith(("/", "http", "*"))
        return (UriTooLong if is_target else HeadersTooLarge)(str(exc)[:200], limit=limit)
    if isinstance(exc, BadHttpMessage) and "Too many headers" in exc.message:
        return HeadersTooLarge(exc.message)
    return MalformedRequest(str(exc)[:200] if exc else f"status {status}")


class AgentConnection(web.RequestHandler):
    """One agent's connection (see the module's docstring)."""

    def __init__(
        self,
        manager: AgentServer,
        *,
        header_timeout: float,
        over_limit: bool,
        refuse: Refuser,
        **kwargs: Any,
    ) -> None:
        super().__init__(manager, loop=manager.loop, **kwargs)
        self.header_timeout = header_timeout
        self.over_limit = over_limit
        self.refuse = refuse
        self._head_deadline: asyncio.TimerHandle | None = None
        #: a response went out on this connection: between requests it is an idle keep-alive
        self.served = False

    async def finish_response(
        self, request: web.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        done = await super().finish_response(request, resp, start_time)
        self.served = True
        return done

    @property
    def idle_until(self) -> float | None:
        """When the keep-alive timer closes this connection if it is idle between requests
        (it served one, waits for the next, holds no byte of it); else ``None``."""
        close_at = self._next_keepalive_close_time
        if (
            self.served
            and self._waiter is not None
            and not self._messages
            and not self._request_in_progress
            and self._head_deadline is None
            and not self._force_close
        ):
            return close_at
        return None

    def data_received(self, data: bytes) -> None:
        # bytes while no request is parsed or running begin a request head: its clock starts
        if (
            self._head_deadline is None
            and data
            and not self._messages
            and not self._request_in_progress
        ):
            self._head_deadline = self._loop.call_later(self.header_timeout, self._head_late)
        super().data_received(data)
        if self._head_deadline is not None and (self._messages or self._request_in_progress):
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_late(self) -> None:
        self._head_deadline = None
        if not self._messages and not self._request_in_progress:
            self.force_close()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None
        super().connection_lost(exc)

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """An envelope instead of aiohttp's plain text; the connection is closed after it."""
        if request.writer.output_size > 0:  # headers already sent: nothing left to say
            raise ConnectionError("response already started")
        response = self.refuse(request, parse_failure(exc, status, self.max_line_size))
        response.force_close()
        return response


class AgentServer(web.Server):
    """aiohttp's low-level server making ``AgentConnection``s and counting them (per address)."""

    def __init__(
        self,
        handler: Any,
        *,
        refuse: Refuser,
        header_timeout: float,
        max_connections: int,
        max_per_client: int | None,
        on_idle_closed: Callable[[], None] = lambda: None,
        **kwargs: Any,
    ) -> None:
        super().__init__(handler, **kwargs)
        #: called for each idle keep-alive connection closed to make room at the cap
        self.on_idle_closed = on_idle_closed
        self.refuse = refuse
        self.header_timeout = header_timeout
        self.max_connections = max_connections
        self.max_per_client = max_per_client
        self.per_client: Counter[str] = Counter()
        self.loop = self._loop

    def __call__(self) -> AgentConnection:
        return AgentConnection(
            self,
            header_timeout=self.header_timeout,
            over_limit=False,
            refuse=self.refuse,
            **self._kwargs,
        )

    def connection_made(self, handler: web.RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        client = _client(transport)
        self.per_client[client] += 1
        if isinstance(handler, AgentConnection):
            over = len(self._connections) > self.max_connections and not self._make_room(handler)
            handler.over_limit = over or (
                self.max_per_client is not None and self.per_client[client] > self.max_per_client
            )

    def _make_room(self, new: AgentConnection) -> bool:
        """Close the longest-idle keep-alive connection for ``new``; whether one was."""
        oldest: AgentConnection | None = None
        oldest_until = 0.0
        for other in self._connections:
            if other is new or not isinstance(other, AgentConnection):
                continue
            until = other.idle_until
            if until is not None and (oldest is None or until < oldest_until):
                oldest, oldest_until = other, until
        if oldest is None:
            return False
        oldest.force_close()  # its connection_lost follows from the loop, and frees its place
        self.on_idle_closed()
        return True

    def connection_lost(
        self, handler: web.RequestHandler, exc: BaseException | None = None
    ) -> None:
        if handler in self._connections:
            client = _client(self._connections[handler])
            self.per_client[client] -= 1
            if self.per_client[client] <= 0:
                del self.per_client[client]
        super().connection_lost(handler, exc)

    def too_many(self, request: web.BaseRequest) -> web.StreamResponse | None:
        """The 503 envelope for a request on a connection past the cap, else None."""
        protocol = request.protocol
        if isinstance(protocol, AgentConnection) and protocol.over_limit:
            response = self.refuse(request, TooManyConnections("connection limit reached"))
            response.force_close()
            return response
        return None


def _client(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
