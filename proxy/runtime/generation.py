"""A generation: the configuration one request runs on, from its first byte to its last.

A reload (``RuleStore.reload``) swaps in a new ``Loaded`` -- settings, compiled rules, upstream
TLS -- as one value. The proxy turns each into a ``Generation``: that value plus what is derived
from it for the request path (routes longest prefix first, build options, connection pools).
``Proxy.handle`` takes the generation in force when a request arrives and keeps it to the end,
so a request in flight finishes on the configuration it started with, as nginx's old workers
finish theirs after ``nginx -s reload``.

Connection pools outlive a reload when they can: a route whose upstream connections are made the
same way (the same upstream, no TLS, the same interim cap) hands its pool to the next generation.
A pool no longer used (a route removed, its upstream or TLS changed) is closed when the last
request of its generation ends, never under one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from structlog.typing import FilteringBoundLogger
from yarl import URL

from proxy.config.choices import ProtocolName
from proxy.config.retries import Retries
from proxy.config.route import Route, below
from proxy.config.settings import Settings
from proxy.edge.forward import Upstreams
from proxy.edge.hosts import Hosts
from proxy.edge.redirect import UpstreamOrigin
from proxy.edge.resource_metadata import NamedPaths
from proxy.edge.target import Origin
from proxy.edge.upstream import Timeouts
from proxy.policy.envelope.build import BuildOptions
from proxy.policy.rules.ruleengine import Loaded


@dataclass(frozen=True, slots=True)
class RouteRuntime:
    route: Route
    origin: Origin
    upstream_host: str | None
    timeout: Timeouts
    #: how redirect headers name the upstream (``None``: the route does not rewrite them)
    redirects: UpstreamOrigin | None
    #: what a path below the route's prefix starts with (``route.below``), made once
    below: str
    #: the hosts and origins agents may use, and whether MCP requests are checked
    hosts: Hosts
    #: the paths of protected-resource metadata this route's challenges named
    metadata: NamedPaths
    #: the route's retry policy (its own, else the top level's), ``None`` when it is off
    retries: Retries | None
    #: each try's timeouts under it: the head within ``per_try_timeout`` (docs/retries.md)
    try_timeout: Timeouts
    #: the statuses it retries
    retry_statuses: frozenset[int]

    @classmethod
    def of(cls, route: Route, settings: Settings) -> RouteRuntime:
        url = URL(route.upstream)
        host = url.host if url.is_default_port() else f"{url.host}:{url.port}"
        # to the response headers once the request is sent; between body bytes, see _stream
        timeout = Timeouts(connect=route.connect_timeout, read=route.read_timeout)
        redirects = UpstreamOrigin.of(route.upstream) if route.rewrite_redirects else None
        origin = Origin.parse(route.upstream)
        hosts = route_hosts(settings, route)
        retries = route.retries or settings.retries
        per_try = min(retries.per_try_timeout or route.read_timeout, route.read_timeout)
        return cls(
            route,
            origin,
            host,
            timeout,
            redirects,
            below(route.prefix),
            hosts,
            NamedPaths(),
            retries if retries.enabled else None,
            Timeouts(connect=route.connect_timeout, read=per_try),
            retries.statuses(),
        )


class Generation:
    """One configuration in force, and the requests running on it (``active``)."""

    __slots__ = ("active", "hosts", "loaded", "options", "retired", "routes", "upstreams")

    def __init__(self, loaded: Loaded, upstreams: Upstreams) -> None:
        settings = loaded.settings
        self.loaded = loaded
        self.upstreams = upstreams
        self.options = BuildOptions(
            retry_after_default_ms=settings.retry_after_default_ms,
            retry_after_max_ms=settings.retry_after_max_ms,
            docs_base_url=(settings.public_url or "").rstrip("/"),
        )
        #: the hosts mend names itself by for a request no route takes (a refusal's links)
        self.hosts = Hosts.of(settings.listen, settings.public_url)
        # longest prefix first, so /api/v2 wins over /api
        self.routes = sorted(
            (RouteRuntime.of(route, settings) for route in settings.routes),
            key=lambda rt: len(rt.route.prefix),
            reverse=True,
        )
        self.active = 0
        self.retired = False

    @classmethod
    def first(cls, loaded: Loaded) -> Generation:
        interim = loaded.settings.max_interim_responses
        return cls(loaded, Upstreams(max_interim_responses=interim, tls=loaded.tls))

    def succeeded_by(self, loaded: Loaded) -> Generation:
        """The next generation, taking over the pools of routes that connect the same way."""
        interim = loaded.settings.max_interim_responses
        upstreams = Upstreams(max_interim_responses=interim, tls=loaded.tls)
        if interim == self.settings.max_interim_responses:
            before = {r.name: r for r in self.settings.routes}
            for route in loaded.settings.routes:
                old = before.get(route.name)
                if old is not None and _same_connections(old, route):
                    upstreams.adopt(self.upstreams, route.name)
        return Generation(loaded, upstreams)

    @property
    def settings(self) -> Settings:
        return self.loaded.settings

    def route_for(self, path: str) -> RouteRuntime | None:
        """The route whose prefix starts the raw (still percent-encoded) path, longest first."""
        for runtime in self.routes:
            if path == runtime.route.prefix or path.startswith(runtime.below):
                return runtime
        return None

    def leave(self) -> bool:
        """A request on this generation ended: whether it was the last one out of a retired
        generation, whose pools can close now."""
        self.active -= 1
        return self.retired and self.active == 0

    def retire(self) -> bool:
        """Superseded: new requests go to the next generation. Whether its pools can close now
        (no request runs on it); else the last one to ``leave`` says so."""
        self.retired = True
        return self.active == 0


class Generations:
    """The configuration in force, and the retired ones requests still run on."""

    def __init__(
        self, loaded: Loaded, changed: Callable[[Settings, Settings], None] | None = None
    ) -> None:
        self._current = Generation.first(loaded)
        #: called with the old and the new settings when a reload changed them
        self._changed = changed
        #: retired generations with requests still running on them, and pools being closed
        self.draining: set[Generation] = set()
        self._closing: set[asyncio.Future[None]] = set()

    def current(self, loaded: Loaded) -> Generation:
        """The generation of ``loaded`` (the last configuration the store loaded)."""
        generation = self._current
        if generation.loaded is not loaded:
            generation = self._advance(generation, loaded)
        return generation

    def enter(self, loaded: Loaded) -> Generation:
        """The generation a request arriving now runs on, to its end (``leave``)."""
        generation = self.current(loaded)
        generation.active += 1
        return generation

    def leave(self, generation: Generation) -> None:
        """A request ended; the last one out of a retired generation closes its pools."""
        if generation.leave():
            self._close(generation)

    def _advance(self, old: Generation, loaded: Loaded) -> Generation:
        """A reload happened: new requests run on the new configuration; the old one closes its
        pools once its last request ends."""
        new = self._current = old.succeeded_by(loaded)
        if loaded.settings != old.settings and self._changed is not None:
            self._changed(old.settings, loaded.settings)
        self.draining.add(old)
        if old.retire():
            self._close(old)
        return new

    def _close(self, generation: Generation) -> None:
        self.draining.discard(generation)
        closing = asyncio.ensure_future(generation.upstreams.close())
        self._closing.add(closing)  # the loop holds tasks weakly
        closing.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Close every pool: the configuration in force's, and any a drained request left."""
        for generation in [*self.draining, self._current]:
            self._close(generation)
        await asyncio.gather(*self._closing)


def _same_connections(old: Route, new: Route) -> bool:
    """Whether a pool made for ``old`` serves ``new`` as one made for it would. A TLS route
    never hands over: its next pool reads the CA and client certificate files again. A pool is
    bound to its origin; timeouts are given with each request."""
    return old.tls is None and new.tls is None and old.upstream == new.upstream


def route_hosts(settings: Settings, route: Route) -> Hosts:
    """The hosts and origins ``route`` is reached by, in ``settings`` (``edge/hosts.py``)."""
    return Hosts.of(
        settings.listen, settings.public_url, route.allowed_hosts, route.allowed_origins
    )


def unverified(settings: Settings, logger: FilteringBoundLogger) -> None:
    """``verify: false`` is a warning each time a configuration with it comes into force; so is
    an MCP route whose hosts mend cannot check (``proxy/edge/hosts.py``)."""
    for route in settings.routes:
        hosts = route_hosts(settings, route)
        if route.protocol is ProtocolName.MCP and not hosts.checked:
            logger.warning(
                "mcp_hosts_unchecked",
                route=route.name,
                listen=settings.listen,
                detail="Host and Origin are not checked (no DNS-rebinding protection): mend "
                "listens on every interface and neither public_url nor allowed_hosts names "
                "the hosts agents use",
            )
        if route.tls is not None and not route.tls.verify:
            logger.warning(
                "upstream_tls_verify_disabled",
                route=route.name,
                upstream=route.upstream,
                detail="any certificate is accepted: encrypted, but not authenticated",
            )
