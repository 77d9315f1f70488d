"""Prometheus metrics (docs/contract.md §5), on a registry passed in, never the global one.

Label values are bounded by configuration: route names come from the config, codes and rule ids
from the loaded rules, statuses are three digits. Nothing an upstream or agent sends becomes a
label.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

from proxy import __version__
from proxy.policy.envelope.model import Envelope

#: prometheus-client's multiprocess mode: the directory ``--workers`` share (set by the
#: supervisor); each worker also writes its unexplained shapes there
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
_REWRITE_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1)
_PROCESSING_BUCKETS = (*_REWRITE_BUCKETS, 0.25, 1.0)
#: Label children kept per metric family (see ``Metrics.envelope``): label values come from the
#: configuration, so this is never reached in practice; past it the table starts again.
CHILDREN_MAX = 4096

#: (route, code, category, upstream status, rule, protocol, action, fallback)
_EnvelopeKey = tuple[str, str, str, str, str, str, str, bool]


@dataclass(frozen=True, slots=True)
class RouteMetrics:
    passthrough: Counter
    envelope: Counter
    proxy_failure: Counter
    websocket: Counter
    client_closed: Counter  # the agent hung up before its answer (nginx logs 499)
    rejected: Counter  # refused by OpenAPI validation before the upstream (proxy/policy/openapi/)
    request_duration: Histogram
    upstream_duration: Histogram
    rewrite_duration: Histogram
    processing_duration: Histogram

    def outcome(self, outcome: str) -> Counter:
        counter: Counter = getattr(self, outcome)
        return counter


class Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        # no ``_created`` twin of every counter and histogram (it doubled /metrics): nothing
        # mend's dashboards or alerts read uses it. prometheus-client's switch is process-wide
        # and read when /metrics is scraped; --workers' multiprocess mode never writes one.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = registry
        self.requests = Counter(
            "mend_requests",
            "Requests proxied, by outcome.",
            ["route", "outcome"],
            registry=registry,
        )
        self.errors = Counter(
            "mend_errors",
            "Envelopes returned to agents.",
            ["code", "category", "route", "upstream_status", "rule", "protocol"],
            registry=registry,
        )
        self.unmatched = Counter(
            "mend_unmatched_errors",
            "Errors that only a built-in fallback matched.",
            ["route", "upstream_status"],
            registry=registry,
        )
        self.actions = Counter(
            "mend_error_actions",
            "Envelopes by recovery action.",
            ["route", "action"],
            registry=registry,
        )
        self.repeats = Counter(
            "mend_error_repeats",
            "The same request failing the same way again within the repeat window.",
            ["route", "code", "action"],
            registry=registry,
        )
        self.redactions = Counter(
            "mend_redactions",
            "Redactions applied to agent-facing text.",
            ["kind"],
            registry=registry,
        )
        self.upstream_failures = Counter(
            "mend_upstream_failures",
            "Requests for which no usable upstream response arrived.",
            ["route", "reason"],
            registry=registry,
        )
        #: retries a route's policy made (docs/retries.md): why, and how the retried try ended
        self.retries = Counter(
            "mend_retries",
            "Requests sent again by a retry policy, by what the try before ended in and how "
            "the retry ended.",
            ["route", "reason", "outcome"],
            registry=registry,
        )
        #: retriable failures answered without a retry: the budget, the deadline, an unsafe
        #: request, a wait too long, a body not kept, an open circuit
        self.retries_declined = Counter(
            "mend_retries_declined",
            "Failures a retry policy would retry that were answered instead, by why.",
            ["route", "reason", "why"],
            registry=registry,
        )
        self.request_duration = Histogram(
            "mend_request_duration_seconds",
            "Time from request to response headers and body.",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.upstream_duration = Histogram(
            "mend_upstream_duration_seconds",
            "Time until the upstream's response headers.",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.rewrite_duration = Histogram(
            "mend_rewrite_duration_seconds",
            "Time spent reading, matching and rendering an error.",
            ["route"],
            buckets=_REWRITE_BUCKETS,
            registry=registry,
        )
        self.processing_duration = Histogram(
            "mend_processing_duration_seconds",
            "mend's own time per request: its duration less the wait for the upstream's "
            "response head (and error body) and the time a passed-through body streams.",
            ["route"],
            buckets=_PROCESSING_BUCKETS,
            registry=registry,
        )
        self.reloads = Counter(
            "mend_rule_reloads", "Rule reloads, by result.", ["result"], registry=registry
        )
        # multiprocess_mode says how --workers combines one gauge from several processes
        self.rules_loaded = Gauge(
            "mend_rules_loaded", "Rules in force.", registry=registry, multiprocess_mode="livemax"
        )
        self.last_reload_success = Gauge(
            "mend_rules_last_reload_success_timestamp_seconds",
            "When rules were last loaded successfully.",
            registry=registry,
            multiprocess_mode="livemax",
        )
        self.last_reload_ok = Gauge(
            "mend_rules_last_reload_successful",
            "Whether the last attempt to load rules succeeded (1) or failed (0).",
            registry=registry,
            multiprocess_mode="livemin",  # one worker that failed to reload is a failure
        )
        # WebSocket sessions (proxy/edge/tunnel.py): opened when the upstream's 101 is relayed
        self.websocket_sessions = Counter(
            "mend_websocket_sessions",
            "WebSocket sessions opened (upgrades the upstream accepted).",
            ["route"],
            registry=registry,
        )
        self.websocket_open = Gauge(
            "mend_websocket_sessions_open",
            "WebSocket sessions open now.",
            ["route"],
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.websocket_closed = Counter(
            "mend_websocket_closed",
            "WebSocket sessions ended, by what ended them: agent, upstream (the side whose "
            "connection ended first), timeout (idle), error or shutdown.",
            ["route", "by"],
            registry=registry,
        )
        self.websocket_bytes = Counter(
            "mend_websocket_bytes",
            "Bytes relayed through WebSocket sessions, by direction (to_upstream, to_agent).",
            ["route", "direction"],
            registry=registry,
        )
        self.idle_closed = Counter(
            "mend_idle_connections_closed",
            "Idle keep-alive agent connections closed to make room for a new one at "
            "max_connections.",
            registry=registry,
        )
        self._routes: dict[str, RouteMetrics] = {}
        #: ``labels()`` resolved once per label set: it validates and locks on every call
        self._envelopes: dict[_EnvelopeKey, tuple[Counter, Counter, Counter | None]] = {}
        self._redactions: dict[str, Counter] = {}
        self._repeats: dict[tuple[str, str, str], Counter] = {}
        Gauge(
            "mend_build_info",
            "mend's version.",
            ["version"],
            registry=registry,
            multiprocess_mode="livemax",
        ).labels(__version__).set(1)

    def for_route(self, route: str) -> RouteMetrics:
        """Label children for one route, resolved once: ``labels()`` is not free per request."""
        cached = self._routes.get(route)
        if cached is None:
            cached = self._routes[route] = RouteMetrics(
                passthrough=self.requests.labels(route, "passthrough"),
                envelope=self.requests.labels(route, "envelope"),
                proxy_failure=self.requests.labels(route, "proxy_failure"),
                websocket=self.requests.labels(route, "websocket"),
                client_closed=self.requests.labels(route, "client_closed"),
                rejected=self.requests.labels(route, "rejected"),
                request_duration=self.request_duration.labels(route),
                upstream_duration=self.upstream_duration.labels(route),
                rewrite_duration=self.rewrite_duration.labels(route),
                processing_duration=self.processing_duration.labels(route),
            )
        return cached

    def envelope(
        self,
        route: str,
        envelope: Envelope,
        *,
        fallback: bool,
        protocol: str = "http",
        trace_id: str | None = None,
    ) -> None:
        """Count one envelope; ``protocol`` is one of the five names of ``ProtocolName``; the
        exemplar names the request and, when it was traced and sampled, its trace."""
        status = str(envelope.upstream_status) if envelope.upstream_status is not None else "none"
        key = (
            route,
            envelope.code,
            envelope.category,  # a StrEnum: equal to its value, without the enum's property
            status,
            envelope.rule,
            protocol,
            envelope.action,
            fallback,
        )
        children = self._envelopes.get(key)
        if children is None:
            children = self._envelope_children(key)
        exemplar = {"request_id": envelope.request_id[:64]}
        if trace_id is not None:  # 32 hex digits: the labels stay under OpenMetrics' 128
            exemplar["trace_id"] = trace_id
        errors, actions, unmatched = children
        errors.inc(exemplar=exemplar)
        actions.inc()
        if unmatched is not None:
            unmatched.inc()

    def _envelope_children(self, key: _EnvelopeKey) -> tuple[Counter, Counter, Counter | None]:
        """The children ``envelope`` counts into for one label set, resolved and kept."""
        route, code, category, status, rule, protocol, action, fallback = key
        if len(self._envelopes) >= CHILDREN_MAX:
            self._envelopes.clear()
        children = self._envelopes[key] = (
            self.errors.labels(code, str(category), route, status, rule, protocol),
            self.actions.labels(route, str(action)),
            self.unmatched.labels(route, status) if fallback else None,
        )
        return children

    def redacted(self, kinds: list[str]) -> None:
        for kind in kinds:
            child = self._redactions.get(kind)
            if child is None:
                if len(self._redactions) >= CHILDREN_MAX:
                    self._redactions.clear()
                child = self._redactions[kind] = self.redactions.labels(kind)
            child.inc()

    def repeated(self, route: str, code: str, action: str) -> None:
        """Count one repeat of an error (``mend_repeats_total``), its child resolved once."""
        key = (route, code, action)
        child = self._repeats.get(key)
        if child is None:
            if len(self._repeats) >= CHILDREN_MAX:
                self._repeats.clear()
            child = self._repeats[key] = self.repeats.labels(route, code, action)
        child.inc()

    def reloaded(self, ok: bool, rules: int) -> None:
        self.reloads.labels("success" if ok else "failure").inc()
        self.last_reload_ok.set(1 if ok else 0)
        if ok:
            self.rules_loaded.set(rules)
            self.last_reload_success.set(time.time())


def _repeat_key(fingerprint: str, code: str) -> bytes:
    """16 bytes for any fingerprint: it holds the agent's path and query, as long as it sent."""
    text = f"{code}\x00{fingerprint}".encode("utf-8", "surrogatepass")  # codes hold no NUL
    return hashlib.blake2b(text, digest_size=16).digest()


@dataclass
class RepeatTracker:
    """Notices an agent sending the same failing request again (a retry storm in the making).

    Keeps 16-byte digests of recent failures' fingerprints in a bounded LRU: memory stays flat
    however many agents there are and however long the paths they send (a fingerprint kept as
    text made 10,000 distinct 8 KB paths cost 84 MB; digests cost about 1.5 MB).
    """

    window_s: float = 60.0
    capacity: int = 10_000
    _seen: OrderedDict[bytes, float] = field(default_factory=OrderedDict)

    def seen_again(self, fingerprint: str, code: str, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        key = _repeat_key(fingerprint, code)
        last = self._seen.pop(key, None)
        self._seen[key] = now
        if len(self._seen) > self.capacity:
            self._seen.popitem(last=False)
        return last is not None and now - last <= self.window_s
