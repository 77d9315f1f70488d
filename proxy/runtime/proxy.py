"""The proxy: one request's whole path, top to bottom, in ``Proxy.handle``.

begin -> send (refuse, read, validate, circuit) -> tries (forward -> respond: tunnel | stream |
read -> match -> envelope steps; again while the route's retries say) -> finish (send, log,
count, tell the circuit). One ``Flow`` carries the
request through every step (``proxy/runtime/flow.py``); docs/design.md names the file of each.
Successes never leave the streaming branch; only responses a rule set or the agent's protocol
(``proxy/policy/protocols``) inspects are read, and event streams are rewritten as they arrive.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from aiohttp import web
from structlog.typing import FilteringBoundLogger

from proxy.config.choices import ProtocolName
from proxy.config.settings import Settings
from proxy.edge import agent_body as intake
from proxy.edge import relay
from proxy.edge.failures import ForwardProxyRefused, ProxyFailure, RouteNotFound, upstream_errors
from proxy.edge.forward import upstream_request_headers
from proxy.edge.hosts import allowed, speaks_mcp
from proxy.edge.mcptools import internal as tool_calls
from proxy.edge.openapi_gate import PRESET, OpenAPIGate
from proxy.edge.target import upstream_target
from proxy.edge.upstream import UpstreamError
from proxy.observation.access_log import AccessLog
from proxy.observation.metrics import Metrics, RepeatTracker
from proxy.observation.request_id import request_id
from proxy.policy import upstream_body as bodies
from proxy.policy.crosscall.view import CrossCall
from proxy.policy.evaluate import answer_exchange
from proxy.policy.exchange import NOT_JSON
from proxy.policy.protocols import oauth_client
from proxy.policy.protocols.base import Inspection
from proxy.policy.protocols.detect import Detector
from proxy.policy.protocols.sse import EventRewriter
from proxy.policy.render.negotiation import Negotiator
from proxy.policy.retry.retry_safety import RetrySafety
from proxy.policy.rules.ruleengine import RuleStore
from proxy.policy.rules.ruleset import RuleSet
from proxy.runtime import envelope_steps
from proxy.runtime.books import Books
from proxy.runtime.circuit_gate import CircuitGate
from proxy.runtime.envelope_steps import Count, Enrich, Reply, Review, Step
from proxy.runtime.events import EventStream, lists_tools
from proxy.runtime.failures import Recent
from proxy.runtime.flow import GENERATION, Flow
from proxy.runtime.generation import Generation, Generations, unverified
from proxy.runtime.inspection import bare_call, classify, metadata_document
from proxy.runtime.own_failures import OwnFailures, judge
from proxy.runtime.record import Recorder
from proxy.runtime.retries import Retrier
from proxy.runtime.unexplained import Unexplained
from proxy.runtime.websockets import WebSockets

if TYPE_CHECKING:  # the SDK is imported only when tracing is on (proxy/observation/tracing.py)
    from proxy.observation.traces import Tracer

#: the caller's own session summary, on the agent port (docs/contract.md §7)
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
        books: Books | None = None,
    ) -> None:
        self.store, self.metrics, self.log, self.detector = store, metrics, logger, detector
        #: repeats, session patterns and circuits: what one call cannot see (proxy/policy/crosscall)
        self.crosscall = crosscall
        self.circuits = crosscall.circuits
        self.circuits.start(r.name for r in store.settings.routes)
        #: OpenTelemetry spans, when tracing is configured (``proxy/observation/tracing.py``)
        self.tracer = tracer
        self.generations = Generations(store.loaded, self._configured)
        unverified(store.settings, logger)
        #: MCP tools' annotations seen in tools/list, and routes' retry_safe overrides
        self.retry_safety = RetrySafety()
        #: OpenAPI documents: requests checked before forwarding, envelopes enriched
        self.openapi = OpenAPIGate(lambda request: request[GENERATION].loaded)
        self.gate = CircuitGate(self.circuits, self.openapi)
        self.own = OwnFailures(metrics, detector, self.retry_safety, logger)
        #: failed tries sent again before the agent sees them (``proxy/runtime/retries.py``)
        self.retries = Retrier(metrics, self.own, self.gate)
        #: request lines: every error's, successes' as ``access_log_sample`` says
        self.recorder = Recorder(metrics, logger, AccessLog(lambda: self.store.settings))
        self.websockets = WebSockets(metrics, logger, self.recorder)
        self.review, self.count = Review(crosscall), Count(metrics, RepeatTracker())
        self.reply = Reply(metrics, Negotiator())
        #: the envelope steps after a match, in order (``proxy/runtime/envelope_steps.py``)
        #: the operator's books: what only a fallback explained, the last failures
        self.books = books or Books()
        self.unexplained = Unexplained(self.books)
        self.after_match: tuple[Step, ...] = (
            envelope_steps.attempts,
            self.review,
            self.count,
            self.unexplained,
            Enrich(self.openapi),
            self.reply,
            Recent(self.books),
        )
        #: the steps an event stream's errors take (``proxy/runtime/events.py``)
        self.event_steps: tuple[Step, ...] = (self.review, self.count, self.unexplained)

    def generation(self) -> Generation:
        """The configuration in force: the last one the store loaded."""
        return self.generations.current(self.store.loaded)

    def _configured(self, old: Settings, new: Settings) -> None:
        """A reload changed the settings: warn of unverified TLS again, start new routes'
        circuits."""
        unverified(new, self.log)
        known = {r.name for r in old.routes}
        self.circuits.start(r.name for r in new.routes if r.name not in known)

    # --- the request path -----------------------------------------------------------------------

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """One request, on the configuration in force when it arrived, to its end."""
        flow = self._begin(request, self.generations.enter(self.store.loaded))
        try:
            try:
                # refuse, read, validate, circuit; then each try: forward, and respond (tunnel,
                # stream, or read and rewrite), again while the route's retries say
                await self._send(flow)
            except Exception as exc:
                await self._failed(flow, exc)  # mend's own envelope, a 499, or an abort
            await self._finish(flow)  # send, then log, count, tell the circuit
        finally:
            self.generations.leave(flow.generation)
        assert flow.response is not None
        return flow.response

    def _begin(self, request: web.BaseRequest, generation: Generation) -> Flow:
        """The flow of a request that just arrived: its span, its request id, its route."""
        trace = self.tracer.begin(request) if self.tracer is not None else None
        runtime = generation.route_for(request.rel_url.raw_path)
        return Flow.begin(request, generation, trace, runtime)

    async def _failed(self, flow: Flow, exc: Exception) -> None:
        """What a step raised, answered: a failure with mend's own envelope (``proxy/edge/
        failures.py``), an agent that hung up as nginx's 499, a bug as ``INTERNAL_PROXY_ERROR``;
        once the response has started, nothing is left but to abort."""
        if isinstance(exc, ProxyFailure):
            await self._fail(flow, exc)
        elif isinstance(exc, ConnectionResetError) and not flow.recorded:
            flow.hung_up()
        elif flow.recorded or flow.request.get(relay.STARTED):
            raise exc
        else:
            await self._fail(flow, self.own.bug(exc))

    async def _send(self, flow: Flow) -> None:
        """The request checked, then tried: refused if it is not for a route, too large,
        invalid for its documented operation, or its operation's circuit is open."""
        request, runtime, settings = flow.request, flow.runtime, flow.generation.settings
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
        flow.target = upstream_target(request.raw_path, route.prefix, route.strip_prefix)
        # what the agent speaks, from its headers; a JSON body is kept on the side
        call = flow.call = self.detector.call(request, route.protocol)
        if call is not None and route.tool_errors == "error":
            call.keep_rpc_errors = True
        if runtime.hosts.checked and speaks_mcp(request, route.protocol, call):
            allowed(request, runtime.hosts)  # DNS rebinding: the SDKs' check, made here
        intake.check_size(request, settings)
        sent = intake.body(request, settings, call) if request.body_exists else None
        if flow.trace is not None:  # the call names the span; an MCP body may name its parent
            sent = await flow.trace.called(call, sent, request.content_length)
            flow.exchange.request_id = request_id(request.headers, flow.trace.trace_id)
        # a route with validate_requests checks the request against its documented operation;
        # an invalid one ends here (the body read is forwarded as it came)
        if route.validate_requests or (tool_call and PRESET in request):
            sent = await self.openapi.check(request, route, sent)
        if self.circuits.enabled:
            await self.gate.closed(flow, route)
        await self.retries.run(flow, self._attempt, sent)

    async def _attempt(self, flow: Flow, body: AsyncIterator[bytes] | None) -> None:
        """One try: the request forwarded, its answer given (``Again``: to be tried again)."""
        await self._forward(flow, body)
        await self._respond(flow)

    async def _forward(self, flow: Flow, body: AsyncIterator[bytes] | None) -> None:
        """The request to the upstream, to its response head (``proxy/edge/forward.py``)."""
        request, runtime = flow.request, flow.runtime
        assert runtime is not None
        route = runtime.route
        headers = upstream_request_headers(
            request.headers,
            request_id=flow.request_id,
            client_ip=request.remote,
            scheme=request.scheme,
            host=request.host,
            upstream_host=runtime.upstream_host,
            preserve_host=route.preserve_host,
        )
        pool = flow.generation.upstreams.pool(route.name, runtime.origin)
        # the CLIENT span, whose traceparent goes upstream in place of the agent's
        trace = flow.trace
        client = trace.client(runtime, headers, flow.resends) if trace is not None else None
        forward_at = time.perf_counter()
        timeout = flow.timeouts or runtime.timeout
        try:
            with upstream_errors():
                pending = pool.request(request.method, flow.target, headers, body, timeout)
                upstream = await (pending if client is None else client.send(pending))
        finally:
            flow.waited_s = time.perf_counter() - forward_at
        flow.upstream, flow.upstream_s = upstream, time.perf_counter() - flow.started
        if flow.operation is not None:
            await self.gate.answered(flow, upstream.status)
        self.metrics.for_route(route.name).upstream_duration.observe(flow.upstream_s)

    async def _respond(self, flow: Flow) -> None:
        """The upstream's answer to the agent: a tunnel, a stream, or read and maybe rewritten."""
        upstream = flow.upstream
        assert upstream is not None
        if upstream.status == 101:  # switched protocols (a WebSocket): bytes both ways from here
            await self.websockets.relay(flow)
            return
        try:
            ruleset = flow.generation.loaded.engine.routes[flow.exchange.route]
            # successes stream through untouched unless the route or the agent's protocol
            # inspects them; a stream (SSE, NDJSON, any body without a length) is never held,
            # and an MCP event stream is rewritten event by event as it arrives
            inspection = classify(flow, ruleset, self.detector)
            call = flow.call
            if inspection is Inspection.EVENTS and call is not None and call.protocol:
                events = EventStream(flow, ruleset, self.event_steps, self.count, self.own)
                await events.run(self._stream)
            elif inspection is Inspection.NONE:
                flow.answered(await self._stream(flow), "passthrough")
            else:
                await self._read(flow, ruleset)
        finally:
            upstream.release()

    async def _read(self, flow: Flow, ruleset: RuleSet) -> None:
        """A response read (a REST success only to a peek; an error or a protocol answer to the
        cap) and passed on as it came, unless a rule calls it an error; a success that does not
        arrive whole in time streams on from what was read."""
        upstream, runtime, settings = flow.upstream, flow.runtime, flow.generation.settings
        assert upstream is not None
        assert runtime is not None
        rewrite_started = time.perf_counter()
        is_success = upstream.status < 400
        protocol = flow.call.protocol if flow.call is not None else None
        peek = is_success and protocol is None
        limit = settings.success_peek_bytes if peek else settings.error_body_max_bytes
        raw, complete = await relay.read_capped(
            upstream,
            limit,
            runtime.route.error_body_timeout,
            give_up=is_success and protocol is not None,
        )
        flow.waited_s += time.perf_counter() - rewrite_started
        if is_success and complete and lists_tools(flow.call):
            self._learn_tools(flow, raw)
        if is_success and not complete:
            flow.answered(await self._stream(flow, raw), "passthrough")
            return
        held = not is_success or relay.may_hold_errors(protocol, upstream, raw)
        if held and await self._answer(flow, ruleset, raw, complete):
            flow.outcome = "envelope"
            self.metrics.for_route(flow.exchange.route).rewrite_duration.observe(
                time.perf_counter() - rewrite_started
            )
        else:  # a success, or an error no rule calls one, as it came
            redirect = flow.redirect()
            document = metadata_document(flow, raw) if is_success and complete else None
            passed = relay.buffered(
                upstream, document or raw, flow.request_id, redirect, flow.added()
            )
            if document is not None:  # the upstream's length was the old document's
                passed.headers["Content-Length"] = str(len(document))
            flow.answered(passed, "passthrough")

    async def _answer(self, flow: Flow, ruleset: RuleSet, raw: bytes, complete: bool) -> bool:
        """The envelope response to a read response, in the agent's protocol when it speaks one
        (``evaluate.answer_exchange``); ``False`` when no rule calls it an error."""
        upstream, exchange, route = flow.upstream, flow.exchange, flow.route
        assert upstream is not None
        assert route is not None
        body = _parsed(flow, raw, cut=not complete)
        exchange.status, exchange.headers = upstream.status, upstream.headers
        exchange.content_type = upstream.content_type.lower()
        exchange.text, exchange.json, exchange.truncated = body.text, body.json, body.truncated
        if oauth_client.reads_itself(exchange):  # a token endpoint's error: the client's
            return False
        call = flow.call
        if call is None and route.protocol is not ProtocolName.HTTP and upstream.status >= 400:
            call = flow.call = bare_call(self.detector, flow.request)  # an error may say what
        tool = call.protocol.describe(call).get("tool") if call and call.protocol else None
        if tool is not None or exchange.status in (502, 504):
            # a gateway's answer may have taken effect, and so may a tool's failure that says
            # so (a rule's ``applied: unknown``): the tool's annotations or the method decide
            exchange.tool = tool
            judge(self.retry_safety, flow, exchange, with_call=False)
        redactor, options = flow.redactor(), flow.options()
        answered = answer_exchange(ruleset, exchange, call, self.detector, redactor, options)
        if answered is None:
            return False
        tries = flow.tries  # a failure the route's retries send again raises ``Again``
        if tries is not None and exchange.status in tries.statuses:
            await self.retries.absorb(flow, exchange, answered)
        await envelope_steps.run(self.after_match, flow, exchange, answered)
        return True

    def _learn_tools(self, flow: Flow, raw: bytes) -> None:
        """Remember the tools an MCP ``tools/list`` answer (JSON) lists, with their annotations."""
        body = _parsed(flow, raw, cut=False)
        if body.json is not NOT_JSON:
            self.retry_safety.learn(flow.exchange.route, body.json)

    async def _stream(
        self,
        flow: Flow,
        head: bytes = b"",
        events: EventRewriter | None = None,
        broken: Callable[[UpstreamError], bytes] | None = None,
    ) -> web.StreamResponse:
        """The response passed through as it arrives (``relay.stream``), under the route's
        ``idle_timeout`` and the configuration's ``response_body_max_bytes``."""
        assert flow.upstream is not None
        assert flow.runtime is not None
        how = relay.Passing(
            rid=flow.request_id,
            idle_timeout=flow.runtime.route.idle_timeout,
            limit=flow.generation.settings.response_body_max_bytes,
            log=self.log,
            events=events,
            broken=broken,
            redirect=flow.redirect(),
            added=flow.added(),
        )
        return await relay.stream(flow.request, flow.upstream, head, how)

    async def _fail(self, flow: Flow, failure: ProxyFailure) -> None:
        """Mend's own envelope for ``failure``, through the same steps as an upstream's error."""
        flow.failure = failure
        if flow.call is not None:
            timeout = flow.generation.settings.client_body_timeout
            await intake.read_rest(flow.request, flow.call, timeout)
        answered = self.own.answer(flow, flow.exchange, failure)
        await envelope_steps.run(self.after_match, flow, flow.exchange, answered)
        flow.outcome = getattr(failure, "outcome", "proxy_failure")  # "rejected": openapi

    async def _finish(self, flow: Flow) -> None:
        """Send the response, then log and count it: the agent does not wait for the books.

        The server would send it after the handler returns; sending it here takes the log line
        and the metrics off the agent's latency. A streamed response is already sent; an agent
        gone before its answer is written is logged as nginx's 499, and the server closes its
        connection.
        """
        if flow.recorded:  # a WebSocket session: in the books since its 101 went out
            return
        assert flow.response is not None
        hung_up = flow.outcome == "client_closed"
        if not hung_up:
            try:
                await flow.response.prepare(flow.request)
                await flow.response.write_eof()
            except ConnectionError:
                flow.hung_up()  # gone before its answer was written: nginx's 499 too
        self.recorder.finished(flow)
        if self.circuits.enabled and not hung_up:
            await self.gate.told(flow)

    # --- outside the request path ---------------------------------------------------------------

    def refuse(self, request: web.BaseRequest, failure: ProxyFailure) -> web.StreamResponse:
        """The envelope for a request mend refuses before proxying it (malformed, over a limit),
        logged and counted; the caller sends it. No route, so no cross-call review."""
        trace = self.tracer.begin(request) if self.tracer is not None else None
        flow = Flow.begin(request, self.generation(), trace, None)
        flow.failure = failure
        answered = self.own.answer(flow, flow.exchange, failure)
        self.count(flow, flow.exchange, answered)
        self.reply(flow, flow.exchange, answered)
        flow.outcome = "proxy_failure"
        self.recorder.finished(flow)
        assert flow.response is not None
        return flow.response

    def served_locally(
        self, request: web.BaseRequest, response: web.Response, started: float
    ) -> web.Response:
        """A response mend made itself (a catalog page), with a request id and its log line."""
        return self.recorder.served_locally(request, response, started)

    async def session(self, request: web.BaseRequest) -> web.Response:
        """``GET /_mend/session``: the caller's own session, as the store knows it."""
        started = time.perf_counter()
        summary = await self.crosscall.review.summary(request.headers, request.remote)
        response = web.json_response(summary, headers={"Cache-Control": "no-store"})
        return self.served_locally(request, response, started)

    def stop_tunnels(self) -> None:
        """End every WebSocket session, and those still opening."""
        self.websockets.stop()

    async def close(self) -> None:
        """Close every pool and the cross-call store."""
        await self.generations.close()
        await self.crosscall.close()
        if self.tracer is not None:
            await self.tracer.close()


def _parsed(flow: Flow, raw: bytes, *, cut: bool) -> bodies.Body:
    """The upstream's body as read: decompressed under the cap, decoded, parsed when JSON."""
    upstream = flow.upstream
    assert upstream is not None
    return bodies.parse(
        raw,
        encoding=upstream.headers.get("Content-Encoding", ""),
        charset=upstream.charset,
        limit=flow.generation.settings.decompressed_max_bytes,
        cut=cut,
    )
