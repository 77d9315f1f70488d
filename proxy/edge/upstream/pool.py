"""Keep-alive connections to one upstream origin, and the one way a request goes out on one.

**Each request goes upstream once.** Whatever fails -- a refused connection, a reset before or
after the head, a pooled connection the upstream closed as the request went out on it -- fails
that request, idempotent or not, and is never sent again: nginx's ``proxy_next_upstream off``
with one upstream. aiohttp's client re-sent a GET, HEAD, DELETE or OPTIONS once after a reset on
a reused connection; nginx and Envoy retry only when configured to, and mend answers with
``applied`` and ``retryable`` instead, so that the agent decides (docs/contract.md §1).

A connection goes back to the pool only when its request was written whole, its response read to
the end, and the upstream did not say ``Connection: close``; at most ``Limits.max_idle`` wait
there, each at most ``Limits.keepalive_s`` (aiohttp's 15 s), the most recently used taken first.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import deque
from collections.abc import AsyncIterable
from dataclasses import dataclass

from multidict import CIMultiDict

from proxy.edge.upstream.connection import Connection
from proxy.edge.upstream.errors import (
    ConnectError,
    ConnectTimeout,
    ReadTimeout,
    RequestBodyFailed,
    UpstreamError,
)
from proxy.edge.upstream.head import LAST_CHUNK, chunk, request_head
from proxy.edge.upstream.limits import Limits
from proxy.edge.upstream.response import Response

_DEFAULT_TLS: ssl.SSLContext | None = None


def default_tls() -> ssl.SSLContext:
    """The system's CAs, for an ``https://`` upstream without a ``tls:`` block (made once)."""
    global _DEFAULT_TLS  # noqa: PLW0603 - one context for the process, made when first needed
    if _DEFAULT_TLS is None:
        _DEFAULT_TLS = ssl.create_default_context()
    return _DEFAULT_TLS


@dataclass(frozen=True, slots=True)
class Timeouts:
    """A route's upstream timeouts, in seconds."""

    #: to a connection, TLS handshake included (``connect_timeout``)
    connect: float
    #: from the request sent to the final head, between body bytes until the response is
    #: streamed (``read_timeout``), and for the upstream to take any of the request body
    read: float


class _HeadTimer:
    """``read`` seconds from the request sent to the final head; the first interim response
    starts the same window anew (the old 1xx guard's), the final head must come within it."""

    __slots__ = ("connection", "handle", "seconds")

    def __init__(self, connection: Connection, seconds: float) -> None:
        self.connection, self.seconds = connection, seconds
        self.handle: asyncio.TimerHandle | None = None

    def arm(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
        connection = self.connection
        if not connection.head_done and connection.error is None:
            self.handle = connection.loop.call_later(self.seconds, self._fire)

    def _fire(self) -> None:
        self.handle = None
        self.connection.fail(ReadTimeout(f"no response head within {self.seconds:g} s"))

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


class Pool:
    """The connections to one origin (a route's ``upstream``), with its TLS if it has one."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        base_path: str = "",
        host_header: str,
        tls: ssl.SSLContext | None = None,
        server_name: str | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.host, self.port, self.base_path, self.host_header = host, port, base_path, host_header
        self.tls, self.server_name = tls, server_name
        self.limits = limits or Limits()
        self.max_idle, self.keepalive_s = self.limits.max_idle, self.limits.keepalive_s
        self.idle: deque[Connection] = deque()
        self.closed = False
        self._sweep: asyncio.TimerHandle | None = None
        self._sending: dict[Connection, asyncio.Task[None]] = {}

    async def request(
        self,
        method: str,
        target: str,
        headers: CIMultiDict[str],
        body: AsyncIterable[bytes] | None,
        timeouts: Timeouts,
    ) -> Response:
        """Send a request and return its response once the final head is in (``target`` is
        appended to the origin's base path as it is). Raises an ``UpstreamError``; never
        sends the request twice."""
        head, chunked = request_head(
            method, self.base_path + target, headers, host=self.host_header, body=body is not None
        )
        connection = self._reused() or await self._connect(timeouts.connect)
        timer = _HeadTimer(connection, timeouts.read)
        connection.begin(method, timer.arm, upgrade="Upgrade" in headers)
        connection.read_timeout = timeouts.read
        transport = connection.transport
        assert transport is not None
        transport.write(head)
        if body is None:
            connection.request_done = True
            timer.arm()
        else:
            self._sending[connection] = asyncio.ensure_future(
                self._send(connection, body, chunked, timeouts.read, timer)
            )
        try:
            assert connection.head is not None
            await connection.head
        except BaseException:
            self._done(connection, False)
            raise
        finally:
            timer.cancel()
        return Response(connection, self._done)

    async def _send(
        self,
        connection: Connection,
        body: AsyncIterable[bytes],
        chunked: bool,
        within: float,
        timer: _HeadTimer,
    ) -> None:
        """Stream the request body, waiting while the upstream does not take it (``drain``);
        once it is all sent, the wait for the head starts."""
        try:
            async for data in body:
                transport = connection.transport
                if transport is None or connection.error is not None:
                    return  # the exchange failed already; the failure is the one it had
                if data:
                    transport.write(chunk(data) if chunked else data)
                    if connection.writing_paused:
                        await connection.drain(within)
            if chunked and connection.transport is not None:
                connection.transport.write(LAST_CHUNK)
            connection.request_done = True
            timer.arm()
        except UpstreamError as exc:
            connection.fail(exc)
        except Exception as exc:  # the agent's body failed (mend's own failure, a reset)
            failed = RequestBodyFailed(str(exc) or type(exc).__name__)
            failed.__cause__ = exc
            connection.fail(failed)
        finally:
            self._sending.pop(connection, None)

    def _reused(self) -> Connection | None:
        """The most recently used idle connection still open, if any; expired ones close."""
        idle = self.idle
        if not idle:
            return None
        now = asyncio.get_running_loop().time()
        while idle:
            connection = idle.pop()
            transport = connection.transport
            if transport is None or transport.is_closing():
                continue
            if now - connection.idle_since >= self.keepalive_s:
                transport.close()
                continue
            return connection
        return None

    async def _connect(self, within: float) -> Connection:
        loop = asyncio.get_running_loop()
        context = self.tls
        try:
            async with asyncio.timeout(within):
                _, connection = await loop.create_connection(
                    lambda: Connection(loop, self.limits, self._lost),
                    self.host,
                    self.port,
                    ssl=context,
                    server_hostname=self.server_name if context is not None else None,
                )
        except TimeoutError as exc:
            raise ConnectTimeout(f"no connection within {within:g} s") from exc
        except OSError as exc:  # ssl.SSLError is one: a refused or rejected handshake
            raise ConnectError(str(exc) or type(exc).__name__) from exc
        return connection

    def _done(self, connection: Connection, reuse: bool) -> None:
        """A response was released (``reuse``: whole both ways) or its request failed."""
        connection.head = None  # no exchange: bytes from now on close the connection
        if reuse and not self.closed and len(self.idle) < self.max_idle:
            connection.idle_since = asyncio.get_running_loop().time()
            self.idle.append(connection)
            if self._sweep is None:
                self._sweep = asyncio.get_running_loop().call_later(self.keepalive_s, self._expire)
            return
        sending = self._sending.pop(connection, None)
        if sending is not None:
            sending.cancel()
        transport = connection.transport
        if transport is not None:
            if connection.body_done and connection.error is None:
                transport.close()  # whole, but not to be reused: a graceful close
            else:
                transport.abort()

    def _lost(self, connection: Connection) -> None:
        if connection.head is None:
            with contextlib.suppress(ValueError):  # not idle: in use, or closed on release
                self.idle.remove(connection)

    def _expire(self) -> None:
        """Close the connections idle longer than ``keepalive_s``; look again later if any
        are left."""
        self._sweep = None
        loop = asyncio.get_running_loop()
        oldest = loop.time() - self.keepalive_s
        idle = self.idle
        while idle and idle[0].idle_since <= oldest:
            transport = idle.popleft().transport
            if transport is not None:
                transport.close()
        if idle:
            self._sweep = loop.call_at(idle[0].idle_since + self.keepalive_s, self._expire)

    async def close(self) -> None:
        """Close the idle connections; those in use close when released."""
        self.closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        while self.idle:
            transport = self.idle.pop().transport
            if transport is not None:
                transport.close()
