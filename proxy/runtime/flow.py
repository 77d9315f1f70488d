"""One request on its way through mend: what the pipeline learns about it, in one value.

As mitmproxy's ``HTTPFlow`` and httpx's one ``Request`` passed down its send chain: the proxy
(``proxy/runtime/proxy.py``) makes a ``Flow`` when a request arrives and hands it to every step,
which reads what it needs and writes what it found (the call, the upstream's answer, the
response, the outcome), instead of passing eight arguments from method to method. The policy
floor never sees a ``Flow``: it gets the ``Exchange`` inside it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from aiohttp import web
from yarl import URL

from proxy.edge import redirect
from proxy.edge.passthrough import Added, Redirect
from proxy.observation.request_id import request_id
from proxy.policy.exchange import Exchange

if TYPE_CHECKING:
    from proxy.config.route import Route
    from proxy.edge.failures import ProxyFailure
    from proxy.edge.upstream import Response, Timeouts
    from proxy.observation.traces import RequestTrace
    from proxy.policy.envelope.build import BuildOptions
    from proxy.policy.envelope.model import Envelope
    from proxy.policy.protocols.base import Call
    from proxy.policy.redaction import Redactor
    from proxy.runtime.generation import Generation, RouteRuntime
    from proxy.runtime.tries import Tries


#: the tries made, on responses of a route whose ``retries:`` asks (Envoy's
#: ``x-envoy-attempt-count``)
ATTEMPT_COUNT = "X-Mend-Attempt-Count"


@dataclass(slots=True, eq=False)
class Flow:
    """One request from its first byte to its log line."""

    request: web.BaseRequest
    #: the configuration the request runs on, from its first byte to its last
    generation: Generation
    #: what the policy floor sees of the request and, once read, of the upstream's answer
    exchange: Exchange
    #: the route the path falls under (``None``: no route; the request is refused)
    runtime: RouteRuntime | None
    #: ``time.perf_counter()`` when the request arrived
    started: float
    #: the request's spans, when tracing is on (``proxy/observation/traces.py``)
    trace: RequestTrace | None = None
    #: what the agent speaks (``proxy/policy/protocols``), when the route or the request says
    call: Call | None = None
    #: the request target as it goes upstream (``proxy/edge/target.py``)
    target: str = ""
    #: the operation whose circuit the request counts in (docs/contract.md §7), when circuits are on
    operation: str | None = None
    #: the upstream's response, once its head arrived
    upstream: Response | None = None
    #: seconds from arrival to the upstream's response head
    upstream_s: float | None = None
    #: seconds spent waiting on the upstream: its response head, an error body being read
    waited_s: float = 0.0
    #: what the agent gets, once decided
    response: web.StreamResponse | None = None
    #: how the request ended, for the log line and ``mend_requests_total``
    outcome: str = "passthrough"
    #: the (first) envelope the agent got, if any
    envelope: Envelope | None = None
    #: the failure mend met itself, if any (``proxy/edge/failures.py``)
    failure: ProxyFailure | None = None
    #: logged and counted (``proxy/runtime/record.py``); a WebSocket is, when its 101 goes out
    recorded: bool = False
    #: the tries a retry policy makes (``proxy/runtime/retries.py``), when the route has one
    tries: Tries | None = None
    #: this try's upstream timeouts (``None``: the route's)
    timeouts: Timeouts | None = None

    @classmethod
    def begin(
        cls,
        request: web.BaseRequest,
        generation: Generation,
        trace: RequestTrace | None,
        runtime: RouteRuntime | None,
    ) -> Flow:
        """The flow of a request that just arrived, with its request id (docs/contract.md §5)."""
        rid = request_id(request.headers, trace.trace_id if trace is not None else None)
        route = runtime.route.name if runtime is not None else "none"
        exchange = exchange_of(request, rid, route)
        request[GENERATION] = generation  # not the flow: a flow holds its request
        return cls(request, generation, exchange, runtime, time.perf_counter(), trace)

    @property
    def route(self) -> Route | None:
        """The route's settings (``runtime.route``)."""
        runtime = self.runtime
        return runtime.route if runtime is not None else None

    @property
    def request_id(self) -> str:
        return self.exchange.request_id

    def answered(
        self,
        response: web.StreamResponse,
        outcome: str,
        envelope: Envelope | None = None,
    ) -> None:
        """What the agent gets, and how the request ended."""
        self.response, self.outcome = response, outcome
        if envelope is not None:
            self.envelope = envelope

    @property
    def resends(self) -> int:
        """Tries made before this one (OpenTelemetry's ``http.request.resend_count``)."""
        return self.tries.count - 1 if self.tries is not None else 0

    def added(self) -> Added:
        """The headers mend adds to its answer: the tries made, when the retry policy says."""
        tries = self.tries
        if tries is None or not tries.policy.attempt_count_header:
            return ()
        return ((ATTEMPT_COUNT, str(tries.count)),)

    def again(self, timeouts: Timeouts) -> None:
        """Ready for the next try of the request: what the last one learnt forgotten."""
        exchange = self.exchange
        self.exchange = exchange_of(self.request, exchange.request_id, exchange.route)
        self.upstream = self.failure = self.envelope = self.response = None
        self.outcome, self.timeouts = "passthrough", timeouts

    def hung_up(self) -> None:
        """The agent closed its connection before its answer: nginx's 499, logged, never sent."""
        self.answered(web.Response(status=499), "client_closed")

    def redactor(self) -> Redactor:
        """The route's redactor in the request's configuration: the shipped detectors with its
        ``redaction:`` additions, swapped with the rules on reload."""
        return self.generation.loaded.engine.redactor_for(self.exchange.route)

    def options(self) -> BuildOptions:
        """How envelopes are built here; with no ``public_url``, the catalog's links name the
        host the agent used when the route allows it (docs/contract.md §3), else they are
        relative."""
        gen = self.generation
        if gen.options.docs_base_url:
            return gen.options
        origin = self.agent_origin()
        return replace(gen.options, docs_base_url=origin) if origin else gen.options

    def redirect(self) -> Redirect | None:
        """What names mend instead of the upstream in the response's redirect headers and
        challenges; the metadata a challenge names is remembered for its request."""
        runtime = self.runtime
        origin = runtime.redirects if runtime is not None else None
        if runtime is None or origin is None:
            return None
        base: list[str] = []  # made on the first header that needs it

        def rewrite(name: str, value: str) -> str:
            if not base:
                base.append(self.agent_base())
            if name.lower() != "www-authenticate" or "://" not in base[0]:
                return redirect.rewrite(name, value, origin, base[0])
            value, named = redirect.challenge(value, origin, base[0])
            for url in named:
                runtime.metadata.remember(URL(url).raw_path)
            return value

        return rewrite

    def agent_base(self) -> str:
        """The origin the agent used (``agent_origin``; nothing when it is not known: a path)
        and the route's prefix when it is stripped."""
        route = self.route
        root = route.prefix.rstrip("/") if route is not None and route.strip_prefix else ""
        return self.agent_origin() + root

    def agent_origin(self) -> str:
        """The origin mend writes into URLs (docs/contract.md §3): ``public_url``; else the scheme
        (``X-Forwarded-Proto``) and a host the route allows (``X-Forwarded-Host``, else
        ``Host``); ``""`` when neither is allowed: links and redirects are then paths."""
        settings, headers = self.generation.settings, self.request.headers
        if settings.public_url:
            return settings.public_url.rstrip("/")
        hosts = self.runtime.hosts if self.runtime is not None else self.generation.hosts
        forwarded = headers.get("X-Forwarded-Host", "").split(",", 1)[0].strip()
        host = hosts.named(forwarded) or hosts.named(headers.get("Host"))
        if not host:
            return ""
        scheme = headers.get("X-Forwarded-Proto", "").split(",", 1)[0].strip().lower()
        if scheme not in ("http", "https"):
            scheme = self.request.scheme
        return f"{scheme}://{host}"


#: The configuration a request runs on, for what sees only the request (the OpenAPI gate). The
#: request does not hold its flow: that cycle would leave every request to the cyclic collector.
GENERATION: web.RequestKey[Generation] = web.RequestKey("mend.generation")


def exchange_of(request: web.BaseRequest, rid: str, route: str) -> Exchange:
    """The exchange of a request, before the upstream answers."""
    return Exchange(
        method=request.method,
        path=request.path,
        route=route,
        request_id=rid,
        request_headers=request.headers,
    )


def log_line(exchange: Exchange, status: int, outcome: str, elapsed: float) -> dict[str, Any]:
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
