"""Spans: one request's trace through OpenTelemetry's SDK (imported only when tracing is on).

A request gets one SERVER span (HTTP semantic conventions; MCP's for an MCP call, named
``tools/call <tool>``; GraphQL's operation name) and one CLIENT span per upstream call, whose
``traceparent`` goes upstream. The server span continues the agent's ``traceparent`` (or, with
none, an MCP request's ``params._meta.traceparent``, SEP-414); it starts when the request arrives
but is made only when first needed, so that a parent read from the body is still its parent.
Spans are exported in batches from the SDK's own thread (``BatchSpanProcessor``, ``OTEL_BSP_*``).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from aiohttp import web
from multidict import CIMultiDict
from opentelemetry import trace as otel
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    DEFAULT_OFF,
    DEFAULT_ON,
    ParentBasedTraceIdRatio,
    Sampler,
    TraceIdRatioBased,
)
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from proxy import __version__
from proxy.config.trace_config import TraceConfig
from proxy.observation.span_names import ATTRIBUTE_MAX, protocol_attributes
from proxy.policy.envelope.model import Envelope, Severity
from proxy.policy.exchange import Exchange
from proxy.policy.protocols.base import Call, replayed
from proxy.policy.protocols.jsonrpc import JsonRpc

if TYPE_CHECKING:  # the span reads a route's facts; the runtime that holds them is above
    from proxy.runtime.generation import RouteRuntime

#: Characters of one attribute value (a path can be 64 KiB), unless ``OTEL_*`` set a limit.
ATTRIBUTE_LENGTH = 2048
_LENGTH_VARIABLES = ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")
#: MCP's session and version headers (``mcp.session.id``, ``mcp.protocol.version``).
_SESSION = "Mcp-Session-Id"
_VERSION = "MCP-Protocol-Version"
#: Seconds ``close`` waits for the last spans to be exported.
FLUSH_TIMEOUT_S = 5.0
#: Characters of a ``_meta.traceparent`` / ``tracestate`` read from a body (the propagator's caps).
_TRACEPARENT_MAX = 512
_TRACESTATE_MAX = 8192
_PROPAGATOR = TraceContextTextMapPropagator()


#: The samplers ``OTEL_TRACES_SAMPLER`` names, as the SDK reads them.
_FIXED: dict[str, Sampler] = {
    "always_on": ALWAYS_ON,
    "always_off": ALWAYS_OFF,
    "parentbased_always_on": DEFAULT_ON,
    "parentbased_always_off": DEFAULT_OFF,
}


def _sampler(config: TraceConfig) -> Sampler:
    ratio = 1.0 if config.sampler_arg is None else config.sampler_arg
    if config.sampler == "traceidratio":
        return TraceIdRatioBased(ratio)
    if config.sampler == "parentbased_traceidratio":
        return ParentBasedTraceIdRatio(ratio)
    return _FIXED[config.sampler]


def _resource(config: TraceConfig) -> Resource:
    """``Resource.create`` (which reads ``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME``)
    with the block's attributes on top, and ``service.name`` ``mend`` when nothing names it."""
    attributes: dict[str, str | int] = {"service.version": __version__, "process.pid": os.getpid()}
    attributes.update(config.resource_attributes)
    if config.service_name is not None:
        attributes["service.name"] = config.service_name
    resource = Resource.create(attributes)
    named = str(resource.attributes.get("service.name", ""))
    if not named or named.startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "mend"}))
    return resource


class _PlannedIds(RandomIdGenerator):
    """Random ids, except the trace id of a new trace, chosen when its request arrived: the
    request id an agent reads is that trace's id though its span is made later."""

    def __init__(self) -> None:
        self.planned: int | None = None

    def generate_trace_id(self) -> int:
        planned, self.planned = self.planned, None
        return planned if planned is not None else super().generate_trace_id()


class Tracer:
    """The process's tracer: a ``TracerProvider`` exporting over OTLP/HTTP, and the requests'
    traces it begins. One per process (each worker makes its own after it is spawned)."""

    def __init__(self, provider: TracerProvider, ids: _PlannedIds) -> None:
        self.provider = provider
        self.ids = ids
        self.tracer = provider.get_tracer("mend", __version__)

    @classmethod
    def make(cls, config: TraceConfig) -> Tracer:
        ids = _PlannedIds()
        limited = any(os.environ.get(name) for name in _LENGTH_VARIABLES)
        provider = TracerProvider(
            sampler=_sampler(config),
            resource=_resource(config),
            id_generator=ids,
            span_limits=SpanLimits(max_span_attribute_length=None if limited else ATTRIBUTE_LENGTH),
        )
        exporter = OTLPSpanExporter(endpoint=config.endpoint, headers=config.headers)
        provider.add_span_processor(BatchSpanProcessor(exporter))
        return cls(provider, ids)

    def begin(self, request: web.BaseRequest) -> RequestTrace:
        """The trace of a request that just arrived: the agent's ``traceparent`` continued, else
        a new trace (its span is made when first needed: ``RequestTrace.span``)."""
        headers = request.headers
        carrier = {}
        if (parent := headers.get("traceparent")) is not None:
            carrier["traceparent"] = parent
            if states := headers.getall("tracestate", ()):
                carrier["tracestate"] = ",".join(states)
        return RequestTrace(self, _PROPAGATOR.extract(carrier), request)

    async def close(self) -> None:
        """Export what is left and stop the exporter's thread (at most ``FLUSH_TIMEOUT_S``)."""
        try:
            async with asyncio.timeout(FLUSH_TIMEOUT_S):
                await asyncio.to_thread(self.provider.shutdown)
        except TimeoutError:
            return


def _parent_id(context: Context) -> int | None:
    found = otel.get_current_span(context).get_span_context()
    return found.trace_id if found.is_valid else None


class RequestTrace:
    """One request's spans. The server span starts when the request arrives and is made on
    first use (``span``); ``end`` closes it with what mend answered."""

    __slots__ = (
        "_span",
        "call",
        "client_addr",
        "context",
        "http_route",
        "method",
        "path",
        "remote",
        "scheme",
        "session",
        "started_ns",
        "trace_id",
        "trace_id_int",
        "tracer",
        "version",
    )

    def __init__(self, tracer: Tracer, context: Context, request: web.BaseRequest) -> None:
        self.tracer = tracer
        self.context = context
        self.started_ns = time.time_ns()
        self.method = request.method
        self.path = request.path
        self.scheme = request.scheme
        self.client_addr = request.remote
        self.session = request.headers.get(_SESSION)
        self.version = request.headers.get(_VERSION)
        parent = _parent_id(context)
        self.remote = parent is not None
        self.trace_id_int = parent if parent is not None else tracer.ids.generate_trace_id()
        #: the trace id, 32 hex digits: the request id when the agent sent none
        self.trace_id = f"{self.trace_id_int:032x}"
        self._span: otel.Span | None = None
        self.call: Call | None = None
        self.http_route: str | None = None

    @property
    def span(self) -> otel.Span:
        """The server span, made now if not yet, started when the request arrived."""
        span = self._span
        if span is None:
            if not self.remote:
                self.tracer.ids.planned = self.trace_id_int
            attributes: dict[str, Any] = {
                "http.request.method": self.method,
                "url.path": self.path,
                "url.scheme": self.scheme,
            }
            if self.client_addr:
                attributes["client.address"] = self.client_addr
            try:
                span = self._span = self.tracer.tracer.start_span(
                    self.method,
                    context=self.context,
                    kind=SpanKind.SERVER,
                    attributes=attributes,
                    start_time=self.started_ns,
                )
            finally:
                self.tracer.ids.planned = None
        return span

    @property
    def sampled_id(self) -> str | None:
        """The trace id when the trace is sampled (a metric exemplar names it), else ``None``:
        there would be no trace to see."""
        return self.trace_id if self.span.get_span_context().trace_flags.sampled else None

    # --- the agent's call ------------------------------------------------------------------

    async def called(
        self, call: Call | None, body: AsyncIterator[bytes] | None, length: int | None
    ) -> AsyncIterator[bytes] | None:
        """Remember the call (its protocol names the span). With no ``traceparent`` header, a
        JSON body of known ``length`` that fits the call's copy is read before it is forwarded
        (under the body reader's own timeouts), for MCP's ``params._meta.traceparent``
        (SEP-414). Returns the body to forward: what was read, then the rest."""
        self.call = call
        if self.remote or self._span is not None or call is None or body is None:
            return body
        if call.tee is None or length is None or length > call.cap:
            return body
        if call.protocol is not None and not isinstance(call.protocol, JsonRpc):
            return body
        head: list[bytes] = []
        async for chunk in body:
            head.append(chunk)
            if call.seen > call.cap:
                break
        if call.complete:
            self._adopt(_meta_carrier(call))
        return replayed(head, body, call.ended)

    def _adopt(self, carrier: dict[str, str] | None) -> None:
        if carrier is None:
            return
        context = _PROPAGATOR.extract(carrier)
        parent = _parent_id(context)
        if parent is not None:
            self.context, self.trace_id_int, self.remote = context, parent, True
            self.trace_id = f"{parent:032x}"

    # --- the upstream call -----------------------------------------------------------------

    def client(
        self, runtime: RouteRuntime, headers: CIMultiDict[str], resends: int = 0
    ) -> ClientSpan:
        """The CLIENT span of the upstream call about to be made (one per try: ``resends``
        tries went before it); its ``traceparent`` (and the agent's ``tracestate``) replace the
        agent's in ``headers``."""
        origin = runtime.origin
        self.http_route = runtime.route.prefix
        port = origin.port or (443 if origin.scheme == "https" else 80)
        span = self.tracer.tracer.start_span(
            self.method,
            context=otel.set_span_in_context(self.span),
            kind=SpanKind.CLIENT,
            attributes={
                "http.request.method": self.method,
                "server.address": origin.host,
                "server.port": port,
                "mend.route": runtime.route.name,
            },
        )
        if resends:
            span.set_attribute("http.request.resend_count", resends)
        headers.popall("traceparent", None)
        headers.popall("tracestate", None)
        _PROPAGATOR.inject(headers, context=otel.set_span_in_context(span))
        return ClientSpan(span)

    # --- the answer ------------------------------------------------------------------------

    def end(self, exchange: Exchange, status: int, outcome: str, envelope: Envelope | None) -> None:
        """Close the server span with what mend answered: the status, and for an envelope
        status ERROR, ``error.type`` (the code), ``mend.rule`` and ``mend.request_id``. A span
        the sampler dropped is only ended: nothing would keep what it is told."""
        span = self.span
        if not span.is_recording():
            span.end()
            return
        attributes: dict[str, Any] = {
            "http.response.status_code": status,
            "mend.route": exchange.route,
            "mend.outcome": outcome,
            "mend.request_id": exchange.request_id,
        }
        name = self.method
        if self.http_route is not None:
            attributes["http.route"] = self.http_route
            name = f"{self.method} {self.http_route}"
        if exchange.status is not None:
            attributes["mend.upstream_status"] = exchange.status
        protocol_name = protocol_attributes(self.call, self.session, self.version, attributes)
        if protocol_name is not None:
            name = protocol_name
        span.update_name(name)
        if envelope is not None:
            attributes["mend.rule"] = envelope.rule
            attributes["mend.category"] = envelope.category.value
            attributes["mend.action"] = envelope.action.value
            if envelope.severity is not Severity.INFO:
                attributes["error.type"] = envelope.code
                span.set_status(Status(StatusCode.ERROR, envelope.message[:ATTRIBUTE_MAX]))
        elif status >= 500:
            attributes["error.type"] = str(status)
            span.set_status(Status(StatusCode.ERROR))
        span.set_attributes(attributes)
        span.end()


class _Status(Protocol):
    """What the span reads of an upstream response (``proxy.edge.upstream.Response``)."""

    @property
    def status(self) -> int: ...


_Answer = TypeVar("_Answer", bound=_Status)


class ClientSpan:
    """The upstream call's span: ended when the response head arrives or the call fails."""

    __slots__ = ("span",)

    def __init__(self, span: otel.Span) -> None:
        self.span = span

    async def send(self, pending: Awaitable[_Answer]) -> _Answer:
        span = self.span
        try:
            response = await pending
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__qualname__)
            span.set_status(Status(StatusCode.ERROR, type(exc).__qualname__))
            span.end()
            raise
        span.set_attribute("http.response.status_code", response.status)
        if response.status >= 400:
            span.set_attribute("error.type", str(response.status))
            span.set_status(Status(StatusCode.ERROR))
        span.end()
        return response


def _meta_carrier(call: Call) -> dict[str, str] | None:
    """``params._meta.traceparent`` (and ``tracestate``) of a single JSON-RPC request (SEP-414)."""
    document = call.document()
    params = document.get("params") if isinstance(document, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        return None
    parent, state = meta.get("traceparent"), meta.get("tracestate")
    if not isinstance(parent, str) or len(parent) > _TRACEPARENT_MAX:
        return None
    carrier = {"traceparent": parent}
    if isinstance(state, str) and len(state) <= _TRACESTATE_MAX:
        carrier["tracestate"] = state
    return carrier
