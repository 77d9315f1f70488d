"""The books of one request once the agent has its answer: its log line, its metrics, the end of
its span (docs/contract.md §5). The agent never waits for them."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from aiohttp import web
from structlog.typing import FilteringBoundLogger

from proxy.edge import relay
from proxy.observation.access_log import AccessLog
from proxy.observation.metrics import Metrics
from proxy.observation.request_id import request_id
from proxy.runtime.flow import exchange_of, log_line

if TYPE_CHECKING:
    from proxy.runtime.flow import Flow

#: characters of an upstream body masked into the log line
LOGGED_BODY_CHARS = 16384


class Recorder:
    """Logs and counts finished requests."""

    def __init__(
        self, metrics: Metrics, log: FilteringBoundLogger, access: AccessLog | None = None
    ) -> None:
        self.metrics = metrics
        self.log = log
        #: which requests get a line (``access_log``, ``access_log_sample``); None: every one
        self.access = access

    def finished(self, flow: Flow) -> None:
        """One request's metrics, the end of its span and (``_logs``) its log line."""
        response, exchange, request = flow.response, flow.exchange, flow.request
        assert response is not None
        flow.recorded = True
        elapsed = time.perf_counter() - flow.started
        per_route = self.metrics.for_route(exchange.route)
        per_route.outcome(flow.outcome).inc()
        own = elapsed - flow.waited_s - request.get(relay.STREAMED, 0.0)
        per_route.processing_duration.observe(max(own, 0.0))
        trace = flow.trace
        if trace is None:
            per_route.request_duration.observe(elapsed)
        else:  # the span ends, and the log line and a latency exemplar name its trace
            trace.end(exchange, response.status, flow.outcome, flow.envelope)
            sampled = trace.sampled_id
            per_route.request_duration.observe(
                elapsed, {"trace_id": sampled} if sampled is not None else None
            )
        if self._logs(flow, response.status):
            self.log.info("request", **self._line(flow, response.status, elapsed))

    def _line(self, flow: Flow, status: int, elapsed: float) -> dict[str, object]:
        """The request's log line: ``log_line``'s fields and those this request has."""
        exchange, envelope = flow.exchange, flow.envelope
        line = log_line(exchange, status, flow.outcome, elapsed)
        if flow.trace is not None:
            line["trace_id"] = flow.trace.trace_id
        if exchange.status is not None:
            line["upstream_status"] = exchange.status
        if flow.upstream_s is not None:
            line["upstream_ms"] = round(flow.upstream_s * 1000, 3)
        if flow.tries is not None and flow.tries.count > 1:
            line["attempts"] = flow.tries.count
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
        return line

    def _logs(self, flow: Flow, status: int) -> bool:
        """Whether this request gets its line: every error does, successes as sampled."""
        if self.access is None:
            return True
        error = flow.envelope is not None or flow.failure is not None
        return self.access.logs(status, error=error)

    def served_locally(
        self, request: web.BaseRequest, response: web.Response, started: float
    ) -> web.Response:
        """A response mend made itself (a catalog page), with a request id and its log line."""
        exchange = exchange_of(request, request_id(request.headers), "none")
        response.headers["X-Request-ID"] = exchange.request_id
        response.headers["Server"] = "mend"  # as on envelopes: no "Python/x aiohttp/y" banner
        elapsed = time.perf_counter() - started
        if self.access is None or self.access.logs(response.status):
            self.log.info("request", **log_line(exchange, response.status, "catalog", elapsed))
        return response
