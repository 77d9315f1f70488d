"""The books of one request once the agent has its answer: its log line, its metrics, the end of
its span (docs/contract.md §5). The agent never waits for them."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from aiohttp import web
from structlog.typing import FilteringBoundLogger

from proxy.edge import relay
from proxy.observation.metrics import Metrics
from proxy.observation.request_id import request_id
from proxy.runtime.flow import exchange_of, log_line

if TYPE_CHECKING:
    from proxy.runtime.flow import Flow

#: characters of an upstream body masked into the log line
LOGGED_BODY_CHARS = 16384


class Recorder:
    """Logs and counts finished requests."""

    def __init__(self, metrics: Metrics, log: FilteringBoundLogger) -> None:
        self.metrics = metrics
        self.log = log

    def finished(self, flow: Flow) -> None:
        """One request's log line and metrics, from what its flow says."""
        response, exchange, request = flow.response, flow.exchange, flow.request
        assert response is not None
        flow.recorded = True
        elapsed = time.perf_counter() - flow.started
        per_route = self.metrics.for_route(exchange.route)
        per_route.outcome(flow.outcome).inc()
        own = elapsed - flow.waited_s - request.get(relay.STREAMED, 0.0)
        per_route.processing_duration.observe(max(own, 0.0))
        line = log_line(exchange, response.status, flow.outcome, elapsed)
        trace, envelope = flow.trace, flow.envelope
        if trace is None:
            per_route.request_duration.observe(elapsed)
        else:  # the span ends, and the log line and a latency exemplar name its trace
            trace.end(exchange, response.status, flow.outcome, envelope)
            line["trace_id"] = trace.trace_id
            sampled = trace.sampled_id
            per_route.request_duration.observe(
                elapsed, {"trace_id": sampled} if sampled is not None else None
            )
        if exchange.status is not None:
            line["upstream_status"] = exchange.status
        if flow.upstream_s is not None:
            line["upstream_ms"] = round(flow.upstream_s * 1000, 3)
        if envelope is not None:
            line["code"], line["rule"] = envelope.code, envelope.rule
            if envelope.applied is not None:
                line["applied"] = envelope.applied
            if exchange.protocol != "http":
                line["protocol"] = exchange.protocol
            if exchange.text:
                line["upstream_body"] = flow.redactor().mask(exchange.text[:LOGGED_BODY_CHARS]).text
        if flow.failure is not None:
            line["failure"] = str(flow.failure)
        self.log.info("request", **line)

    def served_locally(
        self, request: web.BaseRequest, response: web.Response, started: float
    ) -> web.Response:
        """A response mend made itself (a catalog page), with a request id and its log line."""
        exchange = exchange_of(request, request_id(request.headers), "none")
        response.headers["X-Request-ID"] = exchange.request_id
        response.headers["Server"] = "mend"  # as on envelopes: no "Python/x aiohttp/y" banner
        elapsed = time.perf_counter() - started
        self.log.info("request", **log_line(exchange, response.status, "catalog", elapsed))
        return response
