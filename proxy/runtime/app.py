"""The proxy: one request's whole path, top to bottom, in ``Proxy.handle``.

protocol -> forward -> classify -> read -> match -> build envelope (redacting) -> render -> observe.
Successes never leave the streaming branch; only responses a rule set or the agent's protocol
(``proxy/policy/protocols``) inspects are read, and event streams are rewritten as they arrive.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from aiohttp import web
from multidict import CIMultiDict
from prometheus_client import CollectorRegistry
from structlog.typing import FilteringBoundLogger

from proxy.edge import agent_body as intake
from proxy.edge import redirect, relay
from proxy.edge.connection import AgentServer
from proxy.edge.failures import (
    CircuitOpen,
    ForwardProxyRefused,
    ProxyBug,
    ProxyFailure,
    RouteNotFound,
    UpstreamProtocolError,
    upstream_errors,
)
from proxy.edge.forward import upstream_request_headers
from proxy.edge.mcptools import internal as tool_calls
from proxy.edge.mcptools.server import ToolServers
from proxy.edge.openapi_gate import PRESET, OpenAPIGate
from proxy.edge.passthrough import Redirect, passthrough_headers
from proxy.edge.target import upstream_target
from proxy.edge.tunnel import Tunnel
from proxy.edge.upstream import Response, UpstreamError
from proxy.observation.logs import make_logger
from proxy.observation.metrics import Metrics, RepeatTracker
from proxy.observation.request_id import request_id
from proxy.policy import nesting
from proxy.policy import upstream_body as bodies
from proxy.policy.build import BuildOptions
from proxy.policy.crosscall.circuit import Blocked, LastError, open_answer
from proxy.policy.crosscall.operation import operation_key
from proxy.policy.crosscall.review import body_digest
from proxy.policy.crosscall.view import CrossCall
from proxy.policy.engine import Engine, Loaded, RuleStore
from proxy.policy.envelope import Action, Category, Envelope
from proxy.policy.evaluate import (
    Answer,
    Evaluation,
    answer,
    answer_exchange,
    described,
    rewrite,
)
from proxy.policy.exchange import NOT_JSON, Exchange
from proxy.policy.openapi.enrich import allow_header
from proxy.policy.protocols.base import Call, Inspection, Protocol, ProtocolName, Rendered
from proxy.policy.protocols.detect import Detector, default_protocols
from proxy.policy.protocols.graphql import RESPONSE_TYPE as GRAPHQL_RESPONSE
from proxy.policy.protocols.sse import Event, EventRewriter
from proxy.policy.redaction import Redactor, is_internal_header
from proxy.policy.render import Negotiator, Rendering, render, safe_header_value
from proxy.policy.retry import retry_after_ms
from proxy.policy.retry_safety import LISTING_MARKER, RetrySafety
from proxy.policy.rulecheck import OWN_FAILURE_VARS
from proxy.policy.ruleset import Match, RuleSet
from proxy.runtime.generation import Generation, RouteRuntime, unverified
from proxy.runtime.settings import Route, Settings
from proxy.tools.catalog import BASE as CATALOG_BASE
from proxy.tools.catalog import Catalog, catalog_pages

if TYPE_CHECKING:  # the SDK is imported only when tracing is on (proxy/observation/tracing.py)
    from proxy.observation.traces import RequestTrace, Tracer

#: Upstream headers an agent needs to act on an envelope; all others are dropped from envelopes.
KEPT_ON_ENVELOPES = re.compile(
    r"^(www-authenticate|allow|accept|accept-patch|accept-post|retry-after|"
    r"(x-)?ratelimit(-.*)?|x-rate-limit-.*|mcp-session-id|mcp-protocol-version)$",
    re.I,
)
#: errors of one response reviewed across calls (one store call each); the rest go as built
REVIEWED_UNITS = 16
#: kept upstream headers the client sends back as they came (never redacted)
_TRANSPORT_ECHOES = frozenset({"mcp-session-id", "mcp-protocol-version"})
_HOST = re.compile(r"^[A-Za-z0-9.\-]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$")
_RID: web.RequestKey[str] = web.RequestKey("mend.request_id", str)
#: the request's spans, when tracing is on (``proxy/observation/traces.py``)
_TRACE: web.RequestKey[RequestTrace] = web.RequestKey("mend.trace")
#: the configuration a request runs on, from its first byte to its last
#: (``proxy/runtime/generation.py``)
_GEN: web.RequestKey[Generation] = web.RequestKey("mend.generation", Generation)
#: the operation whose circuit a request counts in (CONTRACT §7), when circuits are on
_OP: web.RequestKey[str] = web.RequestKey("mend.operation", str)
#: seconds the request waited on the upstream: its response head, an error body being read
_WAITED: web.RequestKey[float] = web.RequestKey("mend.waited_s", float)
#: the caller's own session summary, on the agent port (CONTRACT §7)
SESSION_PATH = "/_mend/session"


class Proxy:
    def __init__(
        self,
        store: RuleStore,
        metrics: Metrics,
        logger: FilteringBoundLogger,
        detector: Detector,
        crosscall: CrossCall,
        tracer: Tracer | None = None,
    ) -> None:
        #: repeats, session patterns and circuits: what one call cannot see (proxy/policy/crosscall)
        self.crosscall = crosscall
        self.circuits = crosscall.circuits
        self.circuits.start(r.name for r in store.settings.routes)
        self.store = store
        self.metrics = metrics
        self.log = logger
        self.detector = detector
        #: OpenTelemetry spans, when tracing is configured (``proxy/observation/tracing.py``); else
        #: None
        self.tracer = tracer
        self._generation = Generation.first(store.loaded)
        unverified(store.settings.routes, logger)
        #: retired generations with requests still running on them, and pools being closed
        self._draining: set[Generation] = set()
        self._closing: set[asyncio.Future[None]] = set()
        self.negotiator = Negotiator()
        self.repeats = RepeatTracker()
        #: MCP tools' annotations seen in tools/list, and routes' retry_safe overrides
        self.retry_safety = RetrySafety()
        #: OpenAPI documents: requests checked before forwarding, envelopes enriched
        self.openapi = OpenAPIGate(lambda request: request[_GEN].loaded)
        #: WebSocket sessions being relayed, ended first when mend shuts down
        self.tunnels: set[Tunnel] = set()
        self.stopping = False

    def generation(self) -> Generation:
        """The configuration in force: the last one the store loaded."""
        generation = self._generation
        if generation.loaded is not self.store.loaded:
            generation = self._advance(generation, self.store.loaded)
        return generation

    def _advance(self, old: Generation, loaded: Loaded) -> Generation:
        """A reload happened: new requests run on the new configuration; the old one closes its
        pools once its last request ends."""
        new = self._generation = old.succeeded_by(loaded)
        if loaded.settings != old.settings:
            unverified(loaded.settings.routes, self.log)
            known = {r.name for r in old.settings.routes}
            self.circuits.start(r.name for r in loaded.settings.routes if r.name not in known)
        self._draining.add(old)
        if old.retire():
            self._close(old)
        return new

    def _close(self, generation: Generation) -> None:
        self._draining.discard(generation)
        closing = asyncio.ensure_future(generation.upstreams.close())
        self._closing.add(closing)  # the loop holds tasks weakly
        closing.add_done_callback(self._closing.discard)

    # --- the request path -----------------------------------------------------------------------

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """One request, on the configuration in force when it arrived, to its end."""
        generation = request[_GEN] = self.generation()
        generation.active += 1
        try:
            return await self._handle(request, generation)
        finally:
            if generation.leave():
                self._close(generation)

    async def _handle(self, request: web.BaseRequest, gen: Generation) -> web.StreamResponse:
        response: web.StreamResponse
        started = time.perf_counter()
        trace = None
        if self.tracer is not None:
            trace = request[_TRACE] = self.tracer.begin(request)
        rid = request[_RID] = request_id(request.headers, trace.trace_id if trace else None)
        runtime = gen.route_for(request.rel_url.raw_path)
        route_name = runtime.route.name if runtime else "none"
        exchange = _exchange(request, rid, route_name)
        upstream_s: float | None = None
        call: Call | None = None
        try:
            if request.method == "CONNECT" or not request.raw_path.startswith("/"):
                raise ForwardProxyRefused("absolute-form or CONNECT request target")
            if runtime is None:
                raise RouteNotFound(request.path)
            route = runtime.route
            # an MCP tool's call (proxy/edge/mcptools) stands on no connection; look no further for
            # an agent's: a missing request key costs a KeyError
            tool_call = request.transport is None
            if tool_call and (refused := request.get(tool_calls.REFUSED)) is not None:
                raise refused  # answered as mend's own failure
            target = upstream_target(request.raw_path, route.prefix, route.strip_prefix)
            # 0. protocol: what the agent speaks, from its headers; a JSON body is kept on the side
            call = self.detector.call(request, route.protocol)
            intake.check_size(request, gen.settings)
            # 0b. a route with validate_requests checks the request against its documented
            # operation; an invalid one ends here (the body read is forwarded as it came)
            sent = intake.body(request, gen.settings, call) if request.body_exists else None
            if trace is not None:  # the call names the span; an MCP body may name its parent
                sent = await trace.called(call, sent, request.content_length)
                rid = exchange.request_id = request[_RID] = request_id(
                    request.headers, trace.trace_id
                )
            if route.validate_requests or (tool_call and PRESET in request):
                sent = await self.openapi.check(request, route, sent)
            # 1. forward, unless the operation's circuit is open
            if self.circuits.enabled:
                await self._closed(request, route)
            forward_at = time.perf_counter()
            try:
                with upstream_errors():
                    upstream = await self._forward(request, runtime, target, rid, sent)
            finally:
                request[_WAITED] = time.perf_counter() - forward_at
            upstream_s = time.perf_counter() - started
            key = request.get(_OP)
            if key and self.circuits.dirty(key) and not self.circuits.counts(upstream.status):
                await self.circuits.succeeded(key)
            self.metrics.for_route(route_name).upstream_duration.observe(upstream_s)
        except ProxyFailure as failure:
            return await self._fail(request, exchange, runtime, failure, started, upstream_s, call)
        except Exception as exc:
            bug = self._bug(exc)
            return await self._fail(request, exchange, runtime, bug, started, upstream_s, call)

        if upstream.status == 101:  # switched protocols (a WebSocket): bytes both ways from here
            return await self._tunnel(request, exchange, runtime, upstream, started, upstream_s)
        try:
            ruleset = gen.loaded.engine.routes[route_name]
            # 2. classify: successes stream through untouched unless the route or the agent's
            # protocol inspects them; a stream (SSE, NDJSON, any body without a length) is never
            # held, and an MCP event stream is rewritten event by event as it arrives
            call, inspection = self._classify(request, runtime, ruleset, upstream, call)
            if inspection is Inspection.EVENTS and call is not None and call.protocol:
                return await self._events(
                    request, exchange, runtime, ruleset, upstream, call, started, upstream_s
                )
            if inspection is Inspection.NONE:
                response = await self._stream(request, runtime, upstream, b"")
                return await self._finish(
                    request, exchange, response, started, upstream_s, "passthrough"
                )
            rewrite_started = time.perf_counter()
            is_success = upstream.status < 400
            # 3. read (a REST success only to a peek; an error or a protocol answer to the cap;
            # a success that does not arrive whole in time streams on from what was read)
            protocol = call.protocol if call is not None else None
            limit = (
                gen.settings.success_peek_bytes
                if is_success and protocol is None
                else gen.settings.error_body_max_bytes
            )
            read_at = time.perf_counter()
            raw, complete = await relay.read_capped(
                upstream,
                limit,
                runtime.route.error_body_timeout,
                give_up=is_success and protocol is not None,
            )
            request[_WAITED] += time.perf_counter() - read_at
            if is_success and complete and _lists_tools(call):
                self._learn_tools(route_name, raw, upstream, gen)
            if is_success and not complete:
                response = await self._stream(request, runtime, upstream, raw)
                return await self._finish(
                    request, exchange, response, started, upstream_s, "passthrough"
                )
            if is_success and not relay.may_hold_errors(protocol, upstream, raw):
                response = relay.buffered(upstream, raw, rid, self._redirect(request, runtime))
                return await self._finish(
                    request, exchange, response, started, upstream_s, "passthrough"
                )
            body = bodies.parse(
                raw,
                encoding=upstream.headers.get("Content-Encoding", ""),
                charset=upstream.charset,
                limit=gen.settings.decompressed_max_bytes,
                cut=not complete,
            )
            exchange.status = upstream.status
            exchange.headers = upstream.headers
            exchange.content_type = upstream.content_type.lower()
            exchange.text, exchange.json, exchange.truncated = body.text, body.json, body.truncated
            # 4-7. match, build, redact, render: in the agent's protocol when it speaks one
            answered = await self._answer(request, runtime, ruleset, exchange, upstream, call)
            if answered is None:  # an inspected success that no rule calls an error
                response = relay.buffered(upstream, raw, rid, self._redirect(request, runtime))
                return await self._finish(
                    request, exchange, response, started, upstream_s, "passthrough"
                )
            response, envelope = answered
            self.metrics.for_route(route_name).rewrite_duration.observe(
                time.perf_counter() - rewrite_started
            )
        except ProxyFailure as failure:
            return await self._fail(request, exchange, runtime, failure, started, upstream_s, call)
        except ConnectionResetError:  # the agent hung up before its answer: nginx's 499
            gone = web.Response(status=499)
            self._observe(request, exchange, gone, started, upstream_s, "client_closed", None, None)
            return gone
        except Exception as exc:
            if request.get(relay.STARTED):  # headers already sent: nothing left to say but abort
                raise
            bug = self._bug(exc)
            return await self._fail(request, exchange, runtime, bug, started, upstream_s, call)
        finally:
            upstream.release()
        # 8. send, then observe
        return await self._finish(
            request, exchange, response, started, upstream_s, "envelope", envelope
        )

    # --- forwarding -----------------------------------------------------------------------------

    async def _forward(
        self,
        request: web.BaseRequest,
        runtime: RouteRuntime,
        target: str,
        rid: str,
        body: AsyncIterator[bytes] | None,
    ) -> Response:
        route = runtime.route
        headers = upstream_request_headers(
            request.headers,
            request_id=rid,
            client_ip=request.remote,
            scheme=request.scheme,
            host=request.host,
            upstream_host=runtime.upstream_host,
            preserve_host=route.preserve_host,
        )
        pool = request[_GEN].upstreams.pool(route.name, runtime.origin)
        # the CLIENT span, whose traceparent goes upstream in place of the agent's
        client = request[_TRACE].client(runtime, headers) if self.tracer is not None else None
        pending = pool.request(request.method, target, headers, body, runtime.timeout)
        return await (pending if client is None else client.send(pending))

    async def _stream(
        self,
        request: web.BaseRequest,
        runtime: RouteRuntime,
        upstream: Response,
        head: bytes,
        events: EventRewriter | None = None,
        broken: Callable[[UpstreamError], bytes] | None = None,
    ) -> web.StreamResponse:
        """The response passed through as it arrives (``relay.stream``), under the route's
        ``idle_timeout`` and the configuration's ``response_body_max_bytes``."""
        return await relay.stream(
            request,
            upstream,
            head,
            rid=_rid(request),
            idle_timeout=runtime.route.idle_timeout,
            limit=request[_GEN].settings.response_body_max_bytes,
            log=self.log,
            events=events,
            broken=broken,
            redirect=self._redirect(request, runtime),
        )

    async def _tunnel(
        self,
        request: web.BaseRequest,
        exchange: Exchange,
        runtime: RouteRuntime,
        upstream: Response,
        started: float,
        upstream_s: float | None,
    ) -> web.StreamResponse:
        """The upstream's 101 to the agent, then a byte tunnel until a side closes or falls idle
        (``proxy/edge/tunnel.py``). Logged and counted when the 101 is sent (outcome ``websocket``)
        and again when the session ends (``websocket_closed``)."""
        route = exchange.route
        metrics = self.metrics
        counts = (
            metrics.websocket_bytes.labels(route, "to_upstream"),
            metrics.websocket_bytes.labels(route, "to_agent"),
        )
        try:
            tunnel = Tunnel(
                request, upstream, idle_timeout=runtime.route.idle_timeout, counts=counts
            )
        except ProxyFailure as failure:  # a 101 that cannot be relayed
            upstream.close()
            return await self._fail(request, exchange, runtime, failure, started, upstream_s)
        exchange.status = upstream.status
        self.tunnels.add(tunnel)
        if self.stopping:  # switched as mend began to stop: the session ends as it opens
            tunnel.stop()
        try:
            with metrics.websocket_open.labels(route).track_inprogress():
                headers = passthrough_headers(upstream.headers, exchange.request_id)
                response = await tunnel.open(headers)
                request[relay.STARTED] = True
                metrics.websocket_sessions.labels(route).inc()
                self._observe(
                    request, exchange, response, started, upstream_s, "websocket", None, None
                )
                await tunnel.run()
        finally:
            self.tunnels.discard(tunnel)
            session = tunnel.summary()
            metrics.websocket_closed.labels(route, session.closed_by.value).inc()
            self.log.info(
                "websocket_closed",
                request_id=exchange.request_id,
                route=route,
                path=exchange.path,
                closed_by=session.closed_by.value,
                duration_ms=round(session.duration_s * 1000, 3),
                bytes_to_upstream=session.to_upstream,
                bytes_to_agent=session.to_agent,
            )
        return response

    # --- envelopes ------------------------------------------------------------------------------

    @staticmethod
    def _redactor(request: web.BaseRequest, route: str | None) -> Redactor:
        """The route's redactor in the request's configuration: the shipped detectors with its
        ``redaction:`` additions, swapped with the rules on reload."""
        return request[_GEN].loaded.engine.redactor_for(route)

    @staticmethod
    def _options(request: web.BaseRequest) -> BuildOptions:
        gen = request[_GEN]
        if gen.options.docs_base_url:
            return gen.options
        # the agent reached us under this host; a Host header that is not a plain host is ignored
        host = request.host if _HOST.match(request.host or "") else gen.settings.listen
        return replace(gen.options, docs_base_url=f"{request.scheme}://{host}")

    def _redirect(self, request: web.BaseRequest, runtime: RouteRuntime) -> Redirect | None:
        """What names mend instead of the upstream in the response's redirect headers."""
        origin = runtime.redirects
        if origin is None:
            return None

        def rewrite(name: str, value: str) -> str:
            return redirect.rewrite(name, value, origin, self._agent_base(request, runtime))

        return rewrite

    @staticmethod
    def _agent_base(request: web.BaseRequest, runtime: RouteRuntime) -> str:
        """The origin the agent used (``public_url``, else ``X-Forwarded-Proto`` and
        ``-Host``, else ``Host``) and the route's prefix when it is stripped."""
        route = runtime.route
        root = route.prefix.rstrip("/") if route.strip_prefix else ""
        public = request[_GEN].settings.public_url
        if public:
            return public.rstrip("/") + root
        headers = request.headers
        scheme = headers.get("X-Forwarded-Proto", "").split(",", 1)[0].strip().lower()
        if scheme not in ("http", "https"):
            scheme = request.scheme
        host = headers.get("X-Forwarded-Host", "").split(",", 1)[0].strip()
        if not _HOST.match(host):
            host = request.host if _HOST.match(request.host or "") else ""
        return f"{scheme}://{host or request[_GEN].settings.listen}{root}"

    def _classify(
        self,
        request: web.BaseRequest,
        runtime: RouteRuntime,
        ruleset: RuleSet,
        upstream: Response,
        call: Call | None,
    ) -> tuple[Call | None, Inspection]:
        """Stream a response, read it, or rewrite its events; and the call whose protocol said
        so (made here when only the response names its protocol)."""
        status = upstream.status
        if status >= 400:
            return call, Inspection.DOCUMENT if ruleset.inspects(status) else Inspection.NONE
        content_type = upstream.content_type
        if 200 <= status < 300 and status != 204 and request.method != "HEAD":
            if (
                call is None
                and content_type == GRAPHQL_RESPONSE
                and runtime.route.protocol is not ProtocolName.HTTP
            ):
                call = self._bare_call(request)
            protocol = self.detector.for_response(call, content_type, NOT_JSON) if call else None
            if call is not None and protocol is not None:
                wanted = protocol.inspects(call, content_type)
                if wanted is not Inspection.NONE:
                    return call, wanted
        if ruleset.inspects(status) and not relay.is_stream(upstream):
            return call, Inspection.DOCUMENT
        return call, Inspection.NONE

    def _bare_call(self, request: web.BaseRequest) -> Call:
        """A call for a request nothing marked, for a response that names its own protocol."""
        return self.detector.make(
            method=request.method,
            query_string=request.query_string,
            accept=request.headers.get("Accept", ""),
        )

    async def _events(
        self,
        request: web.BaseRequest,
        exchange: Exchange,
        runtime: RouteRuntime,
        ruleset: RuleSet,
        upstream: Response,
        call: Call,
        started: float,
        upstream_s: float | None,
    ) -> web.StreamResponse:
        """An event stream (MCP over streamable HTTP) passed event by event as each arrives; an
        event carrying an error is replaced by its protocol's answer, every other one passes
        unchanged at once (``proxy/policy/protocols/sse.py``)."""
        protocol = call.protocol
        assert protocol is not None
        exchange.status, exchange.headers = upstream.status, upstream.headers
        exchange.content_type, exchange.protocol = "application/json", protocol.name.value
        options = self._options(request)
        found: list[Evaluation] = []
        listing = _lists_tools(call)  # every event is read: the tools' annotations are in one
        answered = False  # an event carried a response (a result or an error)

        async def rewrite_event(event: Event) -> bytes | None:
            if event.event not in ("", "message"):
                return None
            document = nesting.loads(event.data)
            if document is NOT_JSON:
                return None
            if listing:
                self.retry_safety.learn(exchange.route, document)
            one = replace(exchange, json=document, text=event.data, queried={})
            try:
                redactor = self._redactor(request, exchange.route)
                answered = answer(protocol, call, one, ruleset, redactor, options)
                if answered is None or answered.rendered is None:
                    return None
                # the cross-call view, as for a JSON answer: repeats, patterns, escalation
                answered = await self._reviewed(request, one, call, answered, upstream.status)
            except Exception as exc:  # a bug must not end the stream the agent is reading
                self._bug(exc)
                return None
            if answered.rendered is None:
                return None
            for evaluation in answered.evaluations:
                self._count(request, exchange, evaluation, protocol)
            if not found:
                exchange.text = event.data  # for the log line, masked there
            found.extend(answered.evaluations)
            return event.with_data(answered.rendered.body.decode("utf-8"))

        marker = _every_event if listing else protocol.may_hold_errors

        def wants(raw: bytes) -> bool:
            nonlocal answered
            answered = answered or b'"result"' in raw or b'"error"' in raw
            return marker(raw)

        def broken(exc: UpstreamError) -> bytes:
            """The stream broke before the call was answered: an event answering it with
            mend's own failure (a hung tool: UPSTREAM_TIMEOUT, applied unknown)."""
            if answered:
                return b""
            try:
                own = replace(exchange, text="")  # the stream's exchange keeps the 200
                failed = self._failure_answer(request, own, _translated(exc), call)
            except Exception as bug:  # the agent still gets the abort
                self._bug(bug)
                return b""
            if failed.rendered is None:
                return b""
            for evaluation in failed.evaluations:
                self._count(request, own, evaluation, failed.protocol)
            found.extend(failed.evaluations)
            return b"event: message\ndata: " + failed.rendered.body + b"\n\n"

        events = EventRewriter(rewrite_event, wants)
        try:
            response = await self._stream(request, runtime, upstream, b"", events, broken)
        except ConnectionResetError:
            if not found:
                raise
            # the agent read its error and hung up before the stream ended (an SDK client
            # closes once it has its answer): still an error, with its code, not a bare 499
            gone = web.Response(status=499)
            first = found[0].envelope
            self._observe(
                request, exchange, gone, started, upstream_s, "client_closed", first, None
            )
            return gone
        outcome, envelope = ("envelope", found[0].envelope) if found else ("passthrough", None)
        return await self._finish(
            request, exchange, response, started, upstream_s, outcome, envelope
        )

    async def _answer(
        self,
        request: web.BaseRequest,
        runtime: RouteRuntime,
        ruleset: RuleSet,
        exchange: Exchange,
        upstream: Response,
        call: Call | None,
    ) -> tuple[web.Response, Envelope] | None:
        """The envelope response to a read response, in the agent's protocol when it speaks one
        (``evaluate.answer_exchange``); ``None`` when no rule calls it an error."""
        route = runtime.route
        if (
            call is None
            and route.protocol is not ProtocolName.HTTP
            and (exchange.status or 0) >= 400
        ):
            call = self._bare_call(request)  # an error body may say what it is (JSON-RPC)
        options = self._options(request)
        redactor = self._redactor(request, route.name)
        if exchange.status in (502, 504):  # a gateway's: the request may have taken effect
            self._judge(request, exchange)
        answered = answer_exchange(ruleset, exchange, call, self.detector, redactor, options)
        if answered is None:
            return None
        status = exchange.status or 502
        answered = await self._reviewed(request, exchange, call, answered, status)
        for evaluation in answered.evaluations:
            self._count(request, exchange, evaluation, answered.protocol)
        return self._reply(
            request,
            route,
            answered.evaluations,
            upstream,
            status,
            answered.rendered,
            exchange,
            call,
        )

    def _judge(
        self, request: web.BaseRequest, exchange: Exchange, call: Call | None = None
    ) -> None:
        """What besides its method says whether a request that may have taken effect is safe
        to send again: the route's ``retry_safe:``, an MCP tool's annotations, the protocol."""
        runtime = request[_GEN].route_for(request.rel_url.raw_path)
        sent = call.document() if call is not None else None
        verdict = self.retry_safety.verdict(runtime.route if runtime else None, exchange, sent)
        exchange.retry_safe, exchange.destructive = verdict.safe, verdict.destructive

    def _learn_tools(self, route: str, raw: bytes, upstream: Response, gen: Generation) -> None:
        """Remember the tools an MCP ``tools/list`` answer (JSON) lists, with their annotations."""
        body = bodies.parse(
            raw,
            encoding=upstream.headers.get("Content-Encoding", ""),
            charset=upstream.charset,
            limit=gen.settings.decompressed_max_bytes,
            cut=False,
        )
        if body.json is not NOT_JSON:
            self.retry_safety.learn(route, body.json)

    def _count(
        self,
        request: web.BaseRequest,
        exchange: Exchange,
        evaluation: Evaluation,
        protocol: Protocol | None,
    ) -> None:
        """One envelope into the metrics: its code, its redactions, whether it repeats."""
        envelope = evaluation.envelope
        trace = request.get(_TRACE) if self.tracer is not None else None
        self.metrics.envelope(
            exchange.route,
            envelope,
            fallback=evaluation.match.rule.is_fallback,
            protocol=protocol.name.value if protocol is not None else ProtocolName.HTTP.value,
            trace_id=trace.sampled_id if trace is not None else None,
        )
        self.metrics.redacted(evaluation.redactions)
        fingerprint = (
            f"{request.remote}|{request.method}|{request.path_qs}|{request.content_length}"
        )
        if self.repeats.seen_again(fingerprint, envelope.code):
            self.metrics.repeats.labels(exchange.route, envelope.code, envelope.action.value).inc()

    def _reply(
        self,
        request: web.BaseRequest,
        route: Route | None,
        evaluations: list[Evaluation],
        upstream: Response | None,
        status: int,
        rendered: Rendered | None,
        exchange: Exchange | None = None,
        call: Call | None = None,
    ) -> tuple[web.Response, Envelope]:
        """The response carrying the envelopes: ``rendered`` in the agent's protocol, else the
        first envelope in the rendering ``Accept`` (or the route) asks for; with the headers
        every envelope gets (CONTRACT §3), and what the route's OpenAPI document adds."""
        envelope = evaluations[0].envelope
        if (
            rendered is None
            and route is not None
            and route.openapi is not None
            and not (request.transport is None and tool_calls.REFUSED in request)  # no call
        ):
            document = exchange.json if exchange is not None and exchange.is_json else None
            sent = call.document() if call is not None else NOT_JSON  # the JSON body kept aside
            envelope = self.openapi.enrich(request, route, envelope, document, sent)
            if envelope.applied == "unknown" and envelope.action is Action.ESCALATE:
                envelope = self.openapi.check_first(request, route, envelope)  # not retryable
        http_status = status
        if route is not None and route.status == 200 and http_status >= 400:
            http_status = 200
        content_type: str | None
        if rendered is None:
            default = route.rendering if route else Rendering.JSON
            rendering = (
                default
                if route and route.force_rendering
                else self.negotiator.choose(request.headers.get("Accept"), default)
            )
            body, content_type = render(envelope, rendering, http_status)
        else:
            body, content_type, http_status = rendered.body, rendered.content_type, rendered.status
            if route is not None and route.status == 200 and http_status >= 400:
                http_status = 200
        headers = CIMultiDict[str]()
        kinds: list[str] = []
        if upstream is not None:
            # the agent's own session: a cookie set with a 401 or a 409 must still reach it
            for cookie in upstream.headers.getall("Set-Cookie", ()):
                headers.add("Set-Cookie", cookie)
            for name, value in upstream.headers.items():
                if KEPT_ON_ENVELOPES.match(name) and not is_internal_header(name):
                    redactor = self._redactor(request, route.name if route else None)
                    text = _scrub_header(name, value, redactor, kinds)
                    if text:
                        headers.add(name, safe_header_value(text, limit=2048))
        if envelope.category is Category.METHOD_NOT_ALLOWED and "Allow" not in headers:
            allow = allow_header(envelope.allowed_values)  # RFC 9110: a 405 says what is
            if allow is not None:
                headers["Allow"] = allow
        if content_type is not None:
            headers["Content-Type"] = content_type
        headers["X-Request-ID"] = envelope.request_id
        headers["X-Error-Code"] = safe_header_value(envelope.code)
        if not (route and route.force_rendering):
            headers["Vary"] = "Accept"  # the body depends on Accept: caches must key on it
        headers["Server"] = "mend"  # never the default "Python/x aiohttp/y" banner
        if envelope.upstream_status is not None and envelope.upstream_status != http_status:
            headers["X-Upstream-Status"] = str(envelope.upstream_status)
        if envelope.retryable and envelope.retry_after_ms is not None:
            headers["Retry-After"] = str(math.ceil(envelope.retry_after_ms / 1000))
        self.metrics.redacted(kinds)
        if request.transport is None:  # an MCP tool's call: what its result is made of
            request[tool_calls.ENVELOPE] = envelope
        return web.Response(status=http_status, body=body, headers=headers), envelope

    def _bug(self, exc: Exception) -> ProxyBug:
        self.log.exception("mend_bug", error=type(exc).__name__)
        return ProxyBug(type(exc).__name__)

    async def _fail(
        self,
        request: web.BaseRequest,
        exchange: Exchange,
        runtime: RouteRuntime | None,
        failure: ProxyFailure,
        started: float,
        upstream_s: float | None,
        call: Call | None = None,
    ) -> web.StreamResponse:
        if call is not None:
            await intake.read_rest(request, call, request[_GEN].settings.client_body_timeout)
        answered = self._failure_answer(request, exchange, failure, call)
        answered = await self._reviewed(request, exchange, call, answered, failure.status)
        response, envelope = self._failure_reply(request, exchange, runtime, failure, answered)
        outcome = getattr(failure, "outcome", "proxy_failure")  # "rejected": proxy/policy/openapi
        return await self._finish(
            request, exchange, response, started, upstream_s, outcome, envelope, failure
        )

    def _failure(
        self,
        request: web.BaseRequest,
        exchange: Exchange,
        runtime: RouteRuntime | None,
        failure: ProxyFailure,
        call: Call | None = None,
    ) -> tuple[web.Response, Envelope]:
        answered = self._failure_answer(request, exchange, failure, call)
        return self._failure_reply(request, exchange, runtime, failure, answered)

    def _failure_answer(
        self,
        request: web.BaseRequest,
        exchange: Exchange,
        failure: ProxyFailure,
        call: Call | None,
    ) -> Answer:
        """The envelope of a failure mend met itself, in the agent's protocol when it speaks one."""
        if failure.upstream:
            self.metrics.upstream_failures.labels(exchange.route, failure.reason).inc()
        exchange.status = None
        exchange.applied = failure.applied
        rule = request[_GEN].loaded.engine.own[failure.rule]
        found: dict[str, Any] = {}
        for name in OWN_FAILURE_VARS & failure.context.keys():
            found[name] = failure.context[name]
        match = Match(rule, found)
        protocol = self.detector.resolve(call) if call is not None else None
        if protocol is not None and call is not None:
            described(protocol, call, exchange)
        if failure.applied == "unknown":
            self._judge(request, exchange, call)
        evaluation = rewrite(
            match, exchange, self._redactor(request, exchange.route), self._options(request)
        )
        if isinstance(blocked := failure.context.get("blocked"), Blocked):
            evaluation.envelope = open_answer(evaluation.envelope, blocked)
        if protocol is None or call is None:
            return Answer(None, [evaluation])
        rendered = protocol.render_whole(call, evaluation.envelope, failure.status)
        return Answer(rendered, [evaluation], protocol)

    def _failure_reply(
        self,
        request: web.BaseRequest,
        exchange: Exchange,
        runtime: RouteRuntime | None,
        failure: ProxyFailure,
        answered: Answer,
    ) -> tuple[web.Response, Envelope]:
        for evaluation in answered.evaluations:
            self._count(request, exchange, evaluation, answered.protocol)
        route = runtime.route if runtime else None
        return self._reply(
            request, route, answered.evaluations, None, failure.status, answered.rendered, exchange
        )

    # --- the cross-call view ------------------------------------------------------------------

    async def _reviewed(
        self,
        request: web.BaseRequest,
        exchange: Exchange,
        call: Call | None,
        answered: Answer,
        status: int,
    ) -> Answer:
        """The answer with this session's repeats and patterns in its envelopes (one store call
        per error; none if the store does not answer in time). A response holding several
        errors (a batch, GraphQL errors) has each of its first ``REVIEWED_UNITS`` reviewed on
        its own, known by what it answers (``Unit.key``)."""
        if not answered.evaluations:
            return answered
        length = request.content_length
        if length is None and call is not None:
            length = call.seen
        body = body_digest(bytes(call.tee) if call and call.tee is not None else None, length)
        if len(answered.evaluations) == 1 and len(answered.units) <= 1:
            reviewed = [await self._review(request, exchange, answered.evaluations[0], body)]
        else:
            pairs = list(zip(answered.evaluations, answered.units, strict=True))
            reviewed = list(
                await asyncio.gather(
                    *(
                        self._review(request, exchange, evaluation, f"{body}#{unit.key}")
                        for evaluation, unit in pairs[:REVIEWED_UNITS]
                    )
                )
            )
        changed = {
            id(evaluation.envelope): envelope
            for evaluation, envelope in zip(answered.evaluations, reviewed, strict=False)
            if envelope is not evaluation.envelope
        }
        if not changed:
            return answered
        for evaluation in answered.evaluations:
            evaluation.envelope = changed.get(id(evaluation.envelope), evaluation.envelope)
        protocol = answered.protocol
        if protocol is not None and answered.rendered is not None and call is not None:
            if answered.outcomes:  # errors in the protocol's shape, put back in place
                answered.outcomes = [(u, changed.get(id(e), e)) for u, e in answered.outcomes]
                answered.rendered = protocol.render(call, exchange, answered.outcomes)
            else:
                envelope = answered.evaluations[0].envelope
                answered.rendered = protocol.render_whole(call, envelope, status)
        return answered

    async def _review(
        self, request: web.BaseRequest, exchange: Exchange, evaluation: Evaluation, body: str
    ) -> Envelope:
        """One failure counted into its session (``crosscall/review.py``)."""
        return await self.crosscall.review.envelope(
            evaluation.envelope,
            headers=request.headers,
            client=request.remote,
            method=request.method,
            route=exchange.route,
            path=request.raw_path,
            body=body,
        )

    async def _closed(self, request: web.BaseRequest, route: Route) -> None:
        """``CircuitOpen`` when the request's operation has its circuit open; else the request
        goes on, its operation noted for what its answer tells the circuit."""
        template = self.openapi.template(request, route) if route.openapi is not None else None
        key = operation_key(route.name, request.method, request.rel_url.raw_path, template)
        request[_OP] = key
        blocked = await self.circuits.blocked(route.name, key)
        if blocked is not None:
            raise CircuitOpen(
                f"circuit open for {blocked.wait_ms} ms more",
                wait_ms=blocked.wait_ms,
                blocked=blocked,
            )

    async def _circuit(
        self,
        request: web.BaseRequest,
        exchange: Exchange,
        status: int | None,
        envelope: Envelope | None,
        failure: ProxyFailure | None,
    ) -> None:
        """Tell the operation's circuit how the upstream answered, once the agent has its answer:
        only unreachable, timed out, or a status of ``circuit.statuses`` counts; any other
        answer the upstream gave resets the count (a success did already, in ``_handle``)."""
        key = request.get(_OP)
        if key is None:
            return
        if failure is not None:
            if not failure.upstream:
                return  # mend refused it, or the circuit was open: the upstream was not asked
            if failure.reason not in ("unreachable", "timeout"):
                await self.circuits.succeeded(key)  # it answered, if badly
                return
            reason = failure.reason
        elif status is not None and self.circuits.counts(status):
            reason = f"status {status}"
        else:
            return
        last = None
        if envelope is not None:
            last = LastError(
                envelope.code, envelope.message, envelope.category, envelope.upstream_status
            )
        # the wait the upstream itself asked for (Retry-After, a rate-limit reset), not a default
        wait = retry_after_ms(exchange.headers) if exchange.headers else None
        await self.circuits.failed(exchange.route, key, reason, last, wait)

    # --- send and observe ----------------------------------------------------------------------

    async def _finish(
        self,
        request: web.BaseRequest,
        exchange: Exchange,
        response: web.StreamResponse,
        started: float,
        upstream_s: float | None,
        outcome: str,
        envelope: Envelope | None = None,
        failure: ProxyFailure | None = None,
    ) -> web.StreamResponse:
        """Send the response, then log and count it: the agent does not wait for the books.

        aiohttp would send it after the handler returns; sending it here takes the log line and
        the metrics off the agent's latency. A streamed response is already sent; an agent that
        hung up is still logged, and aiohttp closes its connection.
        """
        try:
            await response.prepare(request)
            await response.write_eof()
        except ConnectionError:
            pass
        self._observe(request, exchange, response, started, upstream_s, outcome, envelope, failure)
        if self.circuits.enabled:
            status = exchange.status
            if status is None and outcome == "passthrough":
                status = response.status  # a streamed answer is passed with its own status
            await self._circuit(request, exchange, status, envelope, failure)
        return response

    def refuse(self, request: web.BaseRequest, failure: ProxyFailure) -> web.StreamResponse:
        """The envelope for a request mend refuses before proxying it (malformed, over a limit),
        logged and counted; the caller sends it."""
        started = time.perf_counter()
        request[_GEN] = self.generation()
        trace = None
        if self.tracer is not None:
            trace = request[_TRACE] = self.tracer.begin(request)
        rid = request_id(request.headers, trace.trace_id if trace else None)
        exchange = _exchange(request, rid, "none")
        response, envelope = self._failure(request, exchange, None, failure)
        self._observe(
            request, exchange, response, started, None, "proxy_failure", envelope, failure
        )
        return response

    def _observe(
        self,
        request: web.BaseRequest,
        exchange: Exchange,
        response: web.StreamResponse,
        started: float,
        upstream_s: float | None,
        outcome: str,
        envelope: Envelope | None,
        failure: ProxyFailure | None,
    ) -> None:
        elapsed = time.perf_counter() - started
        per_route = self.metrics.for_route(exchange.route)
        per_route.outcome(outcome).inc()
        trace = request.get(_TRACE) if self.tracer is not None else None
        own = elapsed - request.get(_WAITED, 0.0) - request.get(relay.STREAMED, 0.0)
        per_route.processing_duration.observe(max(own, 0.0))
        line = _log_line(exchange, response.status, outcome, elapsed)
        if trace is None:
            per_route.request_duration.observe(elapsed)
        else:  # the span ends, and the log line and a latency exemplar name its trace
            trace.end(exchange, response.status, outcome, envelope)
            line["trace_id"] = trace.trace_id
            sampled = trace.sampled_id
            per_route.request_duration.observe(
                elapsed, {"trace_id": sampled} if sampled is not None else None
            )
        if exchange.status is not None:
            line["upstream_status"] = exchange.status
        if upstream_s is not None:
            line["upstream_ms"] = round(upstream_s * 1000, 3)
        if envelope is not None:
            line["code"], line["rule"] = envelope.code, envelope.rule
            if envelope.applied is not None:
                line["applied"] = envelope.applied
            if exchange.protocol != "http":
                line["protocol"] = exchange.protocol
            if exchange.text:
                masked = self._redactor(request, exchange.route).mask(exchange.text[:16384])
                line["upstream_body"] = masked.text
        if failure is not None:
            line["failure"] = str(failure)
        self.log.info("request", **line)

    def served_locally(
        self, request: web.BaseRequest, response: web.Response, started: float
    ) -> web.Response:
        """A response mend made itself (a catalog page), with a request id and its log line."""
        exchange = _exchange(request, request_id(request.headers), "none")
        response.headers["X-Request-ID"] = exchange.request_id
        response.headers["Server"] = "mend"  # as on envelopes: no "Python/x aiohttp/y" banner
        elapsed = time.perf_counter() - started
        self.log.info("request", **_log_line(exchange, response.status, "catalog", elapsed))
        return response

    def stop_tunnels(self) -> None:
        """End every WebSocket session, and those still opening: one has no request boundary
        to drain to."""
        self.stopping = True
        for tunnel in list(self.tunnels):
            tunnel.stop()

    async def session(self, request: web.BaseRequest) -> web.Response:
        """``GET /_mend/session``: the caller's own session, as the store knows it."""
        started = time.perf_counter()
        summary = await self.crosscall.review.summary(request.headers, request.remote)
        response = web.json_response(summary, headers={"Cache-Control": "no-store"})
        return self.served_locally(request, response, started)

    async def close(self) -> None:
        """Close every pool (the configuration in force, and any a drained request left) and the
        cross-call store."""
        for generation in [*self._draining, self._generation]:
            self._close(generation)
        await asyncio.gather(*self._closing)
        await self.crosscall.close()
        if self.tracer is not None:
            await self.tracer.close()


#: Digest challenge parameters made for the client to send back verbatim: random by design,
#: secrets to no one (RFC 7616 section 3.3); redacted, they made Digest authentication fail.
_CHALLENGE_ECHOES = re.compile(r'(\b(?:nonce|opaque)=(?:"[^"]{0,512}"|[^\s,]{0,512}))', re.I)


def _scrub_header(name: str, value: str, redactor: Redactor, kinds: list[str]) -> str:
    """A kept upstream header for an envelope, redacted; a challenge's nonce and opaque are
    kept as sent, the rest of it (realm, error_description) is redacted like any text. MCP's
    session id and revision are the transport's, echoed by the client: kept as sent (a session
    id looks like a key, and a masked one ends the session)."""
    if name.lower() in _TRANSPORT_ECHOES:
        return value
    pieces = _CHALLENGE_ECHOES.split(value) if name.lower() == "www-authenticate" else [value]
    out = []
    for index, piece in enumerate(pieces):
        if index % 2 or not piece.strip(" ,"):  # a nonce= or opaque= parameter, or a comma
            out.append(piece)
            continue
        core = piece.strip()
        scrubbed = redactor.scrub(core)
        kinds.extend(scrubbed.kinds)
        start = piece.index(core)
        out.append(piece[:start] + scrubbed.text + piece[start + len(core) :])
    return "".join(out)


def _lists_tools(call: Call | None) -> bool:
    """Whether a call may be an MCP ``tools/list`` (a byte scan of the kept body, no parse)."""
    return (
        call is not None
        and call.protocol is not None
        and call.protocol.name is ProtocolName.MCP
        and call.holds(LISTING_MARKER)
    )


def _every_event(_: bytes) -> bool:
    return True


def _translated(exc: UpstreamError) -> ProxyFailure:
    """The failure ``upstream_errors`` makes of what the upstream client raised mid-stream."""
    try:
        with upstream_errors():
            raise exc
    except ProxyFailure as failure:
        return failure
    return UpstreamProtocolError(type(exc).__name__)  # not reached: every ClientError maps


def _rid(request: web.BaseRequest) -> str:
    return request.get(_RID) or request_id(request.headers)


def _exchange(request: web.BaseRequest, rid: str, route: str) -> Exchange:
    return Exchange(
        method=request.method,
        path=request.path,
        route=route,
        request_id=rid,
        request_headers=request.headers,
    )


def _log_line(exchange: Exchange, status: int, outcome: str, elapsed: float) -> dict[str, Any]:
    """The fields every request's log line has; callers add only those their request has, since
    every keyword passes through structlog's layers."""
    return {
        "request_id": exchange.request_id,
        "route": exchange.route,
        "method": exchange.method,
        "path": exchange.path,
        "status": status,
        "outcome": outcome,
        "latency_ms": round(elapsed * 1000, 3),
    }


class MendServer(AgentServer):
    """The agent port: the error catalog's pages, the MCP servers of ``mcp_tools:`` routes, and
    every other request proxied.

    aiohttp's low-level server rather than an ``Application``: an application's router,
    middleware chain and response signals cost about 8 % of the instructions of a proxied
    request (callgrind, ``/ok``), and the catalog and the MCP tools are the only things on this
    port that are not the proxy. Non-GET requests and other paths under ``/_mend/`` are the
    upstream's, as before.
    """

    def __init__(
        self, proxy: Proxy, catalog: Catalog, tools: ToolServers | None = None, **kwargs: Any
    ) -> None:
        settings = proxy.generation().settings  # connections are opened as at start (restart)
        super().__init__(
            self._dispatch,
            refuse=proxy.refuse,
            header_timeout=settings.client_header_timeout,
            max_connections=settings.max_connections,
            max_per_client=settings.max_connections_per_client,
            on_idle_closed=proxy.metrics.idle_closed.inc,
            keepalive_timeout=settings.keepalive_timeout,
            max_line_size=settings.max_request_line,
            max_field_size=settings.max_header_size,
            max_headers=settings.max_headers,
            **kwargs,
        )
        self.proxy = proxy
        self.catalog = catalog
        self.pages = catalog_pages(catalog)
        #: the MCP servers of routes with ``mcp_tools:`` (CONTRACT §9, proxy/edge/mcptools)
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
            return await self.tools.serve(request, route)
        return await self.proxy.handle(request)

    def pre_shutdown(self) -> None:
        # WebSocket sessions first: past this aiohttp drops what agents send (it stops reading
        # requests), which a tunnel must not do while relaying the other way
        self.proxy.stop_tunnels()
        super().pre_shutdown()

    async def shutdown(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 (aiohttp API)
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
) -> MendServer:
    """The agent-facing server (serve it with ``web.ServerRunner``). May raise ``RuleError``.
    With a ``source`` (``ConfigSource.load``), reloads read the settings again too."""
    metrics = Metrics(registry)
    store = RuleStore(
        settings, engine or Engine.load(settings), on_reload=[metrics.reloaded], source=source
    )
    metrics.reloaded(True, store.engine.rule_count)
    logger = logger or make_logger()
    crosscall = CrossCall(settings.session, settings.state, settings.circuit, registry, logger)
    proxy = Proxy(store, metrics, logger, Detector(default_protocols()), crosscall, tracer)
    catalog = Catalog(store)
    store.on_reload.append(catalog.refresh)
    tools = tool_servers(proxy)
    store.on_reload.append(tools.reloaded)
    # mend writes its own access log line (``Proxy._finish``); aiohttp's would be a second one
    return MendServer(proxy, catalog, tools, access_log=None)
