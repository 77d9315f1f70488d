"""Active upstream health checks behind ``/readyz`` (issue 17 §8).

A route with ``health_check: {path, interval_s, timeout_s}`` is probed every ``interval_s`` with
``GET <upstream base><path>``, as Envoy's HTTP health checker and Kubernetes' probes do: a 2xx or
3xx answer within ``timeout_s`` is healthy, anything else (another status, a refused connection,
a TLS failure, a timeout) is not. ``/readyz`` answers 503 naming the unhealthy routes while any
checked upstream fails, so a load balancer stops sending agents to a mend whose API is down;
``/healthz`` stays liveness (mend itself runs). Routes without a check are not probed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
from structlog.typing import FilteringBoundLogger

from proxy.config.certificates import ClientTLS, client_tls
from proxy.config.route import Route
from proxy.config.settings import Settings
from proxy.edge.target import Origin


@dataclass
class ProbeSessions:
    """One aiohttp ``ClientSession`` per checked route, made when first probed, with the route's
    TLS. Probes stay on aiohttp (the admin side, off the request path); ``in_words`` says their
    failures as an operator reads them."""

    tls: dict[str, ClientTLS] = field(default_factory=dict)
    _sessions: dict[str, aiohttp.ClientSession] = field(default_factory=dict)

    def session(self, route: str) -> aiohttp.ClientSession:
        session = self._sessions.get(route)
        if session is None:
            tls = self.tls.get(route)
            connector = aiohttp.TCPConnector(
                limit=0, ttl_dns_cache=60, ssl=True if tls is None else tls.context
            )
            session = aiohttp.ClientSession(
                connector=connector,
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
            )
            self._sessions[route] = session
        return session

    def server_name(self, route: str) -> str | None:
        tls = self.tls.get(route)
        return tls.server_name if tls is not None else None

    async def close(self) -> None:
        sessions = list(self._sessions.values())
        self._sessions.clear()
        for session in sessions:
            await session.close()


def _cause(error: OSError) -> str:
    """The operating system's words for an errno (asyncio's own text names the address again)."""
    if error.errno:
        return os.strerror(error.errno).lower()
    return (error.strerror or "connection failed").lower()


def _connect(exc: aiohttp.ClientConnectorError) -> str:
    return f"cannot connect to {exc.host}:{exc.port}: {_cause(exc.os_error)}"


# A probe's failure in words, first match wins (subclasses before their bases); the fallback
# after the table. What ``/readyz`` and the ``upstream_health`` log line say.
_IN_WORDS: tuple[tuple[type[BaseException], Callable[[Any], str]], ...] = (
    (
        aiohttp.ClientConnectorCertificateError,
        lambda e: f"TLS certificate not accepted: {e.certificate_error}",
    ),
    (aiohttp.ClientSSLError, lambda e: "TLS handshake failed"),
    (aiohttp.ClientConnectorDNSError, lambda e: f"cannot resolve {e.host}"),
    (aiohttp.ClientConnectorError, _connect),
    (
        aiohttp.ServerDisconnectedError,
        lambda e: "the upstream closed the connection without answering",
    ),
    (aiohttp.ClientPayloadError, lambda e: "the upstream's answer was cut short"),
    (
        aiohttp.ClientResponseError,
        lambda e: f"the upstream's answer could not be read: {e.message}",
    ),
    (OSError, _cause),
)


def in_words(exc: aiohttp.ClientError | OSError) -> str:
    """A probe's failure as an operator reads it, not the library's class name
    (``ClientConnectorError``)."""
    for kind, say in _IN_WORDS:
        if isinstance(exc, kind):
            return say(exc)
    return "the probe failed"


@dataclass
class RouteHealth:
    route: str
    healthy: bool | None = None  # None: not probed yet
    reason: str = "not checked yet"
    since: float = 0.0  # wall clock of the last change

    def as_dict(self) -> dict[str, object]:
        return {"route": self.route, "healthy": self.healthy, "reason": self.reason}


class HealthChecks:
    """One probing task per checked route; ``unready()`` lists the routes failing now."""

    def __init__(
        self, routes: tuple[Route, ...], upstreams: ProbeSessions, logger: FilteringBoundLogger
    ) -> None:
        self.routes = [r for r in routes if r.health_check is not None]
        self.upstreams = upstreams
        self.log = logger
        self.state = {r.name: RouteHealth(r.name) for r in self.routes}
        self.tasks: list[asyncio.Task[None]] = []
        self._closing: asyncio.Future[None] | None = None

    def unready(self) -> list[dict[str, object]]:
        """Checked routes not known healthy (a route not probed yet counts as not ready)."""
        return [h.as_dict() for h in self.state.values() if h.healthy is not True]

    async def probe(self, route: Route) -> tuple[bool, str]:
        check = route.health_check
        assert check is not None
        url = Origin.parse(route.upstream).url(check.path)
        session = self.upstreams.session(route.name)
        name = self.upstreams.server_name(route.name)
        try:
            async with asyncio.timeout(check.timeout_s):
                async with session.get(
                    url, allow_redirects=False, server_hostname=name
                ) as response:
                    await response.read()
        except TimeoutError:
            return False, f"no answer within {check.timeout_s:g} s"
        except (aiohttp.ClientError, OSError) as exc:
            return False, in_words(exc)
        if 200 <= response.status < 400:
            return True, f"status {response.status}"
        return False, f"status {response.status}"

    def record(self, route: str, healthy: bool, reason: str) -> None:
        state = self.state[route]
        if state.healthy is not healthy:
            level = self.log.info if healthy else self.log.warning
            level("upstream_health", route=route, healthy=healthy, reason=reason)
            state.since = time.time()
        state.healthy, state.reason = healthy, reason

    async def run(self, route: Route) -> None:
        check = route.health_check
        assert check is not None
        while True:
            self.record(route.name, *await self.probe(route))
            await asyncio.sleep(check.interval_s)

    def start(self) -> None:
        self.tasks = [asyncio.ensure_future(self.run(route)) for route in self.routes]

    def on_reload(
        self, store: _HasSettings, loop: asyncio.AbstractEventLoop
    ) -> Callable[[bool, int], None]:
        """A ``RuleStore.on_reload`` listener: when a reloaded config changes what is checked
        (a route's upstream, TLS or ``health_check``), the probes start over on the new routes,
        on the event loop's thread, whichever thread reloaded. Routes kept as they were keep
        their state."""

        def listener(ok: bool, _rules: int) -> None:
            routes = tuple(r for r in store.settings.routes if r.health_check is not None)
            if ok and routes != tuple(self.routes):
                loop.call_soon_threadsafe(self.replace, routes)

        return listener

    def replace(self, routes: tuple[Route, ...]) -> None:
        """Probe ``routes`` from now on (on the loop's thread)."""
        old_tasks, old_upstreams = self.tasks, self.upstreams
        for task in old_tasks:
            task.cancel()
        kept = {r.name: self.state[r.name] for r in routes if r in self.routes}
        self.routes = list(routes)
        self.upstreams = ProbeSessions(tls=client_tls(routes))
        self.state = {r.name: kept.get(r.name) or RouteHealth(r.name) for r in routes}
        self.start()
        self._closing = asyncio.ensure_future(old_upstreams.close())

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._closing is not None:
            await self._closing
        await self.upstreams.close()


class _HasSettings(Protocol):
    @property
    def settings(self) -> Settings: ...


def health_checks(settings: Settings, logger: FilteringBoundLogger) -> HealthChecks:
    """The checks of ``settings``' routes, on connection pools of their own (with each route's
    TLS), so a probe never waits behind agents' requests."""
    return HealthChecks(settings.routes, ProbeSessions(tls=client_tls(settings.routes)), logger)
