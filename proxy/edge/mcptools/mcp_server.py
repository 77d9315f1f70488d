"""The MCP servers of the routes with ``mcp_tools:``: the official SDK's (lowlevel ``Server``
and its streamable-HTTP session manager) with mend's handlers.

Why the SDK's server and not a protocol layer of mend's own: it already speaks every revision
agents use (the ``initialize`` handshake of 2025-06-18 and 2025-11-25 with sessions and their
event streams, 2026-07-28's stateless requests with ``server/discover`` and
``subscriptions/listen``), negotiates versions and answers malformed requests as its own clients
expect; mend supplies two handlers, ``tools/list`` and ``tools/call``. It is an ASGI application,
handed each request by ``asgi.serve``, and started on a route's first MCP request.

``tools/call`` makes the operation's HTTP request (``arguments.http_call``) and runs it through
the proxy in-process (``internal.run``): route, OpenAPI check (always, for a tool: the route's
``validate_requests`` or not), rules, redaction, metrics, log line, cross-call view. An unknown
tool is a failure of mend's own (``TOOL_NOT_FOUND``), answered through the same path.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web
from multidict import CIMultiDict
from structlog.typing import FilteringBoundLogger

from proxy import __version__
from proxy.config.route import Route
from proxy.edge.failures import Refused
from proxy.edge.mcptools import asgi, internal
from proxy.edge.openapi_gate import PRESET
from proxy.observation.request_id import request_id
from proxy.policy.openapi.spec import Mount, Spec
from proxy.policy.rules.ruleengine import Loaded

if TYPE_CHECKING:  # the MCP types load with a route's first MCP request, not with mend
    from proxy.edge.mcptools.results import ToolContext
    from proxy.edge.mcptools.tools import Toolbox, ToolSpec

#: What the server tells the model about its tools' failures (``initialize``, ``server/discover``).
INSTRUCTIONS = (
    "Each tool calls one operation of an HTTP API. A tool that fails returns isError: true with "
    "a recovery plan as text (first line: Error <CODE>) and the details in "
    '_meta["mend/error"]: follow its action, and fix the arguments its invalid_fields name.'
)
#: Tools in one ``tools/list`` page; ``nextCursor`` is the next page's first index.
PAGE_SIZE = 100
#: Bytes of an MCP request body mend reads; of a tool's HTTP answer it keeps.
MAX_MCP_BODY = 1 << 20
MAX_RESULT_BODY = 4 << 20
#: Sessions of the handshake revisions one route keeps (the SDK refuses more with 503), and the
#: ones told about a changed tool list.
MAX_SESSIONS = 1024
#: Documents whose tools are kept (the routes' in force, and a few a reload replaced).
MAX_DOCUMENTS = 64
#: Headers of the MCP request passed on to the tool's HTTP request: the agent's credentials and
#: trace, and its session header (docs/contract.md §7). ``Mcp-Session-Id`` would make the REST
#: request
#: look like MCP to the proxy: it goes as ``X-Agent-Session`` when the agent sent none.
PASSED_HEADERS = (
    "Authorization",
    "Cookie",
    "X-Request-ID",
    "traceparent",
    "tracestate",
    "X-Agent-Session",
)


class ToolNotFound(Refused):
    """``tools/call`` named a tool the route's document does not have."""

    rule, reason, status = "proxy.tool_not_found", "tool_not_found", 404


def mcp_paths(routes: tuple[Route, ...] | list[Route]) -> dict[str, str]:
    """``<prefix><mcp_tools>`` -> route name, for the routes that serve tools."""
    out: dict[str, str] = {}
    for route in routes:
        if route.mcp_tools is not None:
            out[route.prefix.rstrip("/") + route.mcp_tools] = route.name
    return out


class ToolServers:
    """Every route's MCP server: started on its first request, told of reloads, closed last."""

    def __init__(
        self,
        handler: internal.Handler,
        loaded: Callable[[], Loaded],
        logger: FilteringBoundLogger,
    ) -> None:
        self._handler = handler
        self._loaded = loaded
        self.log = logger
        self._servers: dict[str, _RouteServer] = {}
        self._paths: tuple[Any, dict[str, str]] = (None, {})
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        #: each loaded document's tools, made once per document (a reload loads a new one)
        self._boxes: OrderedDict[int, tuple[Spec, Toolbox]] = OrderedDict()

    def workers(self) -> int:
        return self._loaded().settings.workers

    def route_for(self, path: str) -> str | None:
        """The route whose MCP server ``path`` is, if any (one dictionary look-up)."""
        settings = self._loaded().settings
        if self._paths[0] is not settings:
            self._paths = (settings, mcp_paths(settings.routes))
        return self._paths[1].get(path)

    async def serve(self, request: web.BaseRequest, route: str) -> web.StreamResponse:
        if self._closed:  # mend is stopping: its MCP servers are gone
            return web.Response(
                status=503, text="mend is shutting down", headers={"Server": "mend"}
            )
        server = self._servers.get(route)
        if server is None:  # the first request: later ones wait for the same start
            self._loop = asyncio.get_running_loop()
            server = self._servers[route] = _RouteServer(self, route)
            server.begin()
        await server.ready()
        settings = self._loaded().settings
        started = time.perf_counter()
        response = await asgi.serve(
            server.manager.handle_request,
            request,
            limit=2 * MAX_MCP_BODY,  # a backstop: the SDK refuses past MAX_MCP_BODY with a 413
            idle=settings.client_body_timeout,
        )
        self.log.info(  # the MCP exchange itself; each tool call logs its own request line
            "request",
            request_id=request_id(request.headers),
            route=route,
            method=request.method,
            path=request.path,
            status=response.status,
            outcome="mcp_tools",
            latency_ms=round((time.perf_counter() - started) * 1000, 3),
        )
        return response

    def reloaded(self, ok: bool, rules: int) -> None:
        """A reload listener (any thread): servers whose tools changed tell their clients."""
        loop = self._loop
        if ok and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._announce)

    def _announce(self) -> None:
        for server in list(self._servers.values()):
            task = asyncio.ensure_future(server.announce())
            server.tasks.add(task)
            task.add_done_callback(server.tasks.discard)

    async def close(self) -> None:
        self._closed = True
        for server in list(self._servers.values()):
            await server.stop()
        self._servers.clear()

    # --- what the handlers read ------------------------------------------------------------

    async def toolbox(self, route: str) -> tuple[Toolbox, Spec, Route] | None:
        """The route's tools in the configuration in force, its document and its settings;
        a document's tools are made once, in a thread (a large one takes a while)."""
        loaded = self._loaded()
        spec = loaded.engine.specs.get(route)
        found = next((r for r in loaded.settings.routes if r.name == route), None)
        if spec is None or found is None:
            return None
        cached = self._boxes.get(id(spec))
        if cached is not None and cached[0] is spec:
            return cached[1], spec, found
        return await asyncio.to_thread(self._toolbox, spec), spec, found

    def made(self, route: str) -> Toolbox | None:
        """The route's tools if they are made already (never makes them: no wait)."""
        spec = self._loaded().engine.specs.get(route)
        cached = self._boxes.get(id(spec)) if spec is not None else None
        return cached[1] if cached is not None and cached[0] is spec else None

    def _toolbox(self, spec: Spec) -> Toolbox:
        from proxy.edge.mcptools.tools import Toolbox  # noqa: PLC0415

        box = Toolbox.of(spec)
        self._boxes[id(spec)] = (spec, box)
        while len(self._boxes) > MAX_DOCUMENTS:
            self._boxes.popitem(last=False)
        return box

    async def call(
        self, route: str, name: str, arguments: Any, request: web.BaseRequest
    ) -> tuple[ToolSpec | None, internal.Answer, ToolContext | None, str]:
        """The proxy's answer to the tool's HTTP request (or to its refusal), the route's
        tools, and the request line sent."""
        from proxy.edge.mcptools.call_request import http_call  # noqa: PLC0415
        from proxy.edge.mcptools.results import ToolContext  # noqa: PLC0415

        found = await self.toolbox(route)
        headers = CIMultiDict[str]()
        for header in PASSED_HEADERS:
            for value in request.headers.getall(header, ()):
                headers.add(header, value)
        mcp_session = request.headers.get("Mcp-Session-Id")
        if mcp_session and "X-Agent-Session" not in headers:  # the MCP session is the session
            headers["X-Agent-Session"] = mcp_session[:200]
        headers["Accept"] = "application/json"
        headers["Accept-Encoding"] = "identity"
        tool = found[0].by_name.get(name) if found is not None else None
        state: dict[Any, Any]
        context = None
        if tool is None or found is None:
            method, target, body = "POST", request.rel_url.raw_path, None
            state = {internal.REFUSED: ToolNotFound(f"no tool {name[:100]!r}")}
        else:
            context = ToolContext(found[0], found[1], Mount.of(found[2]))
            made = http_call(tool, arguments, context.spec, context.mount)
            headers.extend(made.headers)
            method, target, body = made.method, made.target, made.body
            state = {PRESET: made.violations}
        line = f"{method} {target.split('?', 1)[0]}"
        call = internal.InternalRequest(
            method, target, headers, body, request.remote, request.scheme, request.host
        )
        answer = await internal.run(self._handler, call, limit=MAX_RESULT_BODY, state=state)
        return tool, answer, context, line


class _RouteServer:
    """One route's SDK server and session manager, run as a task until mend stops."""

    def __init__(self, owner: ToolServers, route: str) -> None:
        from proxy.edge.mcptools import sdk  # noqa: PLC0415 (a mend without mcp_tools never loads it)

        self.owner, self.route = owner, route
        self.bus = sdk.InMemorySubscriptionBus()
        self.listen = sdk.ListenHandler(self.bus, max_subscriptions=MAX_SESSIONS)
        self.server = sdk.ToolServer(
            f"mend:{route}",
            version=__version__,
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_subscriptions_listen=self.listen,
            # 2026-07-28 checks a call's Mcp-Param-* headers against the tool's inputSchema:
            # from the tools made already, not by running tools/list for every call
            get_tool_input_schema=self._input_schema,
        )
        # with --workers a session's next request may reach another process, which would not
        # know it: the handshake revisions are served stateless there (no session, no
        # standalone stream, so no list_changed for them; 2026-07-28 is stateless anyway)
        self.manager = sdk.StreamableHTTPSessionManager(
            app=self.server,
            max_sessions=MAX_SESSIONS,
            max_request_body_size=MAX_MCP_BODY,
            stateless=owner.workers() > 1,
        )
        #: legacy sessions that listed the tools: told when the list changes (oldest dropped)
        self.sessions: OrderedDict[int, Any] = OrderedDict()
        self.listed: tuple[Any, ...] | None = None
        self.tasks: set[asyncio.Future[None]] = set()
        self._stop = asyncio.Event()
        self._started = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None

    def begin(self) -> None:
        """Run the session manager as a task until ``stop``."""

        async def run() -> None:
            async with self.manager.run():
                self._started.set()
                await self._stop.wait()

        self._runner = asyncio.ensure_future(run())

    async def ready(self) -> None:
        """Wait (at most 10 s) for the manager ``begin`` started; ``RuntimeError`` if it
        failed."""
        if self._started.is_set():
            return
        assert self._runner is not None
        waiter = asyncio.ensure_future(self._started.wait())
        await asyncio.wait({waiter, self._runner}, timeout=10, return_when="FIRST_COMPLETED")
        waiter.cancel()
        if not self._started.is_set():
            raise RuntimeError(f"the MCP server of route {self.route} did not start")

    async def stop(self) -> None:
        self.listen.close()
        self._stop.set()
        if self._runner is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._runner, timeout=5)

    async def announce(self) -> None:
        """``notifications/tools/list_changed`` to every listener, if the tools changed."""
        from proxy.edge.mcptools.sdk import ToolsListChanged  # noqa: PLC0415

        found = await self.owner.toolbox(self.route)
        listing = tuple(t.definition for t in found[0].tools) if found else ()
        if self.listed is not None and listing == self.listed:
            return
        self.listed = listing
        await self.bus.publish(ToolsListChanged())
        for session in list(self.sessions.values()):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(session.send_tool_list_changed(), timeout=2)

    async def _list_tools(self, ctx: Any, params: Any) -> Any:
        from mcp.shared.exceptions import MCPError  # noqa: PLC0415
        from mcp_types import INVALID_PARAMS, ListToolsResult  # noqa: PLC0415

        self._remember(ctx)
        found = await self.owner.toolbox(self.route)
        tools = [t.definition for t in found[0].tools] if found else []
        if self.listed is None:
            self.listed = tuple(tools)
        cursor = getattr(params, "cursor", None) if params is not None else None
        start = 0
        if cursor is not None:
            if not (cursor.isdigit() and len(cursor) < 10) or int(cursor) > len(tools):
                raise MCPError(code=INVALID_PARAMS, message="unknown cursor: call tools/list again")
            start = int(cursor)
        end = start + PAGE_SIZE
        following = str(end) if end < len(tools) else None
        return ListToolsResult(tools=tools[start:end], next_cursor=following)

    async def _call_tool(self, ctx: Any, params: Any) -> Any:
        from proxy.edge.mcptools.results import tool_result  # noqa: PLC0415

        request = ctx.request.scope[asgi.REQUEST] if ctx.request is not None else None
        if not isinstance(request, web.BaseRequest):
            raise RuntimeError("a tools/call without its HTTP request")
        tool, answer, context, line = await self.owner.call(
            self.route, params.name, params.arguments, request
        )
        return tool_result(tool, answer, params.name, context, line)

    def _input_schema(self, name: str) -> dict[str, Any] | None:
        found = self.owner.made(self.route)
        tool = found.by_name.get(name) if found is not None else None
        return tool.definition.input_schema if tool is not None else None

    def _remember(self, ctx: Any) -> None:
        """Keep a handshake session that listed the tools, to tell it when they change (the
        SDK's session has no public handle on its connection: keyed by the private one)."""
        from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS  # noqa: PLC0415

        session = getattr(ctx, "session", None)
        if session is None or ctx.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
            return
        key = id(getattr(session, "_connection", session))
        self.sessions[key] = session
        self.sessions.move_to_end(key)
        while len(self.sessions) > MAX_SESSIONS:
            self.sessions.popitem(last=False)
