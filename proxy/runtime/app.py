"""The agent port: mend's server, the proxy behind it, and the app factory that wires them.

Every request but the catalog's pages, the caller's session summary and the MCP servers of
``mcp_tools:`` routes goes to ``Proxy.handle`` (``proxy/runtime/proxy.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry
from structlog.typing import FilteringBoundLogger

from proxy.config.settings import Settings
from proxy.edge.catalog import BASE as CATALOG_BASE
from proxy.edge.catalog import Catalog, catalog_pages
from proxy.edge.failures import HostNotAllowed
from proxy.edge.hosts import allowed
from proxy.edge.mcptools.mcp_server import ToolServers
from proxy.edge.server import AgentServer, Limits
from proxy.observation.logs import make_logger
from proxy.observation.metrics import Metrics
from proxy.policy.crosscall.view import CrossCall
from proxy.policy.protocols.detect import Detector, default_protocols
from proxy.policy.rules.ruleengine import Engine, RuleStore
from proxy.runtime.books import Books
from proxy.runtime.proxy import SESSION_PATH, Proxy

if TYPE_CHECKING:  # the SDK is imported only when tracing is on (proxy/observation/tracing.py)
    from proxy.observation.traces import Tracer


class MendServer(AgentServer):
    """The agent port: the error catalog's pages, the MCP servers of ``mcp_tools:`` routes, and
    every other request proxied.

    mend's own server (``proxy/edge/server``) rather than aiohttp's: the catalog and the MCP
    tools are the only things on this port that are not the proxy, and no router is needed.
    Non-GET requests and other paths under ``/_mend/`` are the upstream's, as before.
    """

    def __init__(self, proxy: Proxy, catalog: Catalog, tools: ToolServers | None = None) -> None:
        settings = proxy.generation().settings  # connections are opened as at start (restart)
        limits = Limits(
            header_timeout=settings.client_header_timeout,
            keepalive_timeout=settings.keepalive_timeout,
            send_timeout=settings.send_timeout,
            max_line=settings.max_request_line,
            max_field=settings.max_header_size,
            max_headers=settings.max_headers,
        )
        super().__init__(
            self._dispatch,
            refuse=proxy.refuse,
            limits=limits,
            max_connections=settings.max_connections,
            max_per_client=settings.max_connections_per_client,
            log=proxy.log,
            on_idle_closed=proxy.metrics.idle_closed.inc,
        )
        self.proxy = proxy
        self.catalog = catalog
        self.pages = catalog_pages(catalog)
        #: the MCP servers of routes with ``mcp_tools:`` (docs/contract.md §9, proxy/edge/mcptools)
        self.tools = tools or tool_servers(proxy)

    async def _dispatch(self, request: web.BaseRequest) -> web.StreamResponse:
        if (refused := self.too_many(request)) is not None:
            return refused
        if request.path == SESSION_PATH and request.method == "GET":
            return await self.proxy.session(request)
        if request.path.startswith(CATALOG_BASE):
            started = time.perf_counter()
            page = await self.pages(request)
            if page is not None:
                return self.proxy.served_locally(request, page, started)
        if (route := self.tools.route_for(request.path)) is not None:
            if (refused := self._foreign(request)) is not None:
                return refused
            return await self.tools.serve(request, route)
        return await self.proxy.handle(request)

    def _foreign(self, request: web.BaseRequest) -> web.StreamResponse | None:
        """mend's own MCP server (``mcp_tools``) refuses a ``Host`` or ``Origin`` its route does
        not allow, as every MCP request through mend is (``proxy/edge/hosts.py``)."""
        runtime = self.proxy.generation().route_for(request.rel_url.raw_path)
        if runtime is None or not runtime.hosts.checked:
            return None
        try:
            allowed(request, runtime.hosts)
        except HostNotAllowed as failure:
            return self.proxy.refuse(request, failure)
        return None

    def pre_shutdown(self) -> None:
        # WebSocket sessions first: past this no new request is read, and a tunnel must end
        # cleanly while it still relays the other way
        self.proxy.stop_tunnels()
        super().pre_shutdown()

    async def shutdown(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """End the MCP servers' sessions, drain the agents' connections, then close the
        upstream pools they were using."""
        await self.tools.close()  # first: its sessions' event streams would hold the drain
        await super().shutdown(timeout)
        await self.proxy.close()


def tool_servers(proxy: Proxy) -> ToolServers:
    """The MCP servers of ``mcp_tools:`` routes, their tool calls handled by ``proxy``."""
    return ToolServers(proxy.handle, lambda: proxy.generation().loaded, proxy.log)


def create_app(
    settings: Settings,
    registry: CollectorRegistry,
    *,
    logger: FilteringBoundLogger | None = None,
    engine: Engine | None = None,
    source: Callable[[], Settings] | None = None,
    tracer: Tracer | None = None,
    books: Books | None = None,
) -> MendServer:
    """The agent-facing server (serve it with ``proxy.edge.server.Listener``). May raise
    ``RuleError``.
    With a ``source`` (``ConfigSource.load``), reloads read the settings again too."""
    metrics = Metrics(registry)
    store = RuleStore(
        settings, engine or Engine.load(settings), on_reload=[metrics.reloaded], source=source
    )
    metrics.reloaded(True, store.engine.rule_count)
    logger = logger or make_logger()
    crosscall = CrossCall(settings.session, settings.state, settings.circuit, registry, logger)
    detector = Detector(default_protocols())
    proxy = Proxy(store, metrics, logger, detector, crosscall, tracer, books)
    catalog = Catalog(store)
    store.on_reload.append(catalog.refresh)
    tools = tool_servers(proxy)
    store.on_reload.append(tools.reloaded)
    return MendServer(proxy, catalog, tools)
