"""What happens to an answer's envelopes after a rule matched, as an ordered list of steps.

As structlog's processors: each step takes the flow, the exchange the envelopes were built from
and the answer, and returns the answer. ``Proxy`` runs them in this order for an upstream error
and for a failure mend met itself:

0. ``attempts``: how many tries a retry policy made, when they all failed.
1. ``Review``: the cross-call view (docs/contract.md §7): repeats, session patterns, escalation.
2. ``Count``: every envelope into the metrics (code, redactions, repeats).
3. ``Enrich``: what the route's OpenAPI document adds (fields, next operation, check first).
4. ``Reply``: the response carrying the envelopes, with the headers every envelope gets (§3).

An event stream's errors (``proxy/runtime/events.py``) take the first two: each is rendered
into its own event. A request refused before it reached a route takes ``Count`` and ``Reply``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from multidict import CIMultiDict

from proxy.config.choices import ProtocolName, Rendering
from proxy.edge import envelope_headers
from proxy.edge.mcptools import internal as tool_calls
from proxy.edge.names import USUAL, spelling
from proxy.edge.openapi_gate import OpenAPIGate
from proxy.edge.passthrough import EnvelopeResponse
from proxy.observation.metrics import Metrics, RepeatTracker
from proxy.policy.crosscall.review import body_digest
from proxy.policy.crosscall.view import CrossCall
from proxy.policy.envelope.model import Action, Attempts, Category, Envelope
from proxy.policy.evaluate import Answer, Evaluation
from proxy.policy.exchange import NOT_JSON, Exchange
from proxy.policy.openapi.enrich import allow_header
from proxy.policy.render.negotiation import Negotiator
from proxy.policy.render.render import render, safe_header_value

if TYPE_CHECKING:
    from proxy.config.route import Route
    from proxy.runtime.flow import Flow

#: A step: the answer, changed or not; the cross-call review waits on its store.
Step = Callable[["Flow", Exchange, Answer], Answer | Awaitable[Answer]]

#: errors of one response reviewed across calls (one store call each); the rest go as built
REVIEWED_UNITS = 16
#: kept upstream headers the client reads or sends back as they came, never redacted: an
#: authentication challenge (its parameters, ``resource_metadata``, ``scope``, a Digest
#: ``nonce``, are the client's to read: docs/contract.md §3), MCP's session id and revision (a
#: session
#: id looks like a key, and a masked one ends the session)
_AS_SENT = frozenset({"www-authenticate", "mcp-session-id", "mcp-protocol-version"})
#: kept upstream headers whose URL names mend once rewritten (``proxy/edge/redirect.py``): as
#: rewritten, not redacted (mend's own address is no upstream internal)
_REWRITTEN = frozenset({"location", "refresh"})


def answer_status(flow: Flow, exchange: Exchange) -> int:
    """The status the envelopes answer: the failure's, else the upstream's."""
    if flow.failure is not None:
        return flow.failure.status
    return exchange.status or 502


async def run(steps: tuple[Step, ...], flow: Flow, exchange: Exchange, answer: Answer) -> Answer:
    """``answer`` through ``steps``, in order."""
    for step in steps:
        result = step(flow, exchange, answer)
        answer = result if isinstance(result, Answer) else await result
    return answer


def attempts(flow: Flow, exchange: Exchange, answer: Answer) -> Answer:
    """After several tries that all failed (``proxy/runtime/retries.py``), each envelope says how
    many over how long (docs/contract.md §1 ``attempts``), and waits no less than mend already
    spent trying: the back-off continued."""
    tries = flow.tries
    if tries is None or tries.count < 2 or not answer.evaluations:
        return answer
    elapsed = tries.elapsed_ms()
    made = Attempts(count=tries.count, elapsed_ms=elapsed)
    changed: dict[int, Envelope] = {}
    for evaluation in answer.evaluations:
        envelope = evaluation.envelope
        update: dict[str, object] = {"attempts": made}
        if envelope.retry_after_ms is not None:
            update["retry_after_ms"] = max(envelope.retry_after_ms, elapsed)
        changed[id(envelope)] = envelope.model_copy(update=update)
    _put_back(flow, exchange, answer, changed)
    return answer


class Review:
    """The answer with this session's repeats and patterns in its envelopes (one store call per
    error; none if the store does not answer in time). A response holding several errors (a
    batch, GraphQL errors) has each of its first ``REVIEWED_UNITS`` reviewed on its own, known
    by what it answers (``Unit.key``)."""

    def __init__(self, crosscall: CrossCall) -> None:
        self.crosscall = crosscall

    async def __call__(self, flow: Flow, exchange: Exchange, answer: Answer) -> Answer:
        if not answer.evaluations:
            return answer
        call = flow.call
        length = flow.request.content_length
        if length is None and call is not None:
            length = call.seen
        body = body_digest(bytes(call.tee) if call and call.tee is not None else None, length)
        if len(answer.evaluations) == 1 and len(answer.units) <= 1:
            reviewed = [await self._one(flow, exchange, answer.evaluations[0], body)]
        else:
            pairs = list(zip(answer.evaluations, answer.units, strict=True))[:REVIEWED_UNITS]
            reviewed = list(
                await asyncio.gather(
                    *(self._one(flow, exchange, e, f"{body}#{unit.key}") for e, unit in pairs)
                )
            )
        changed = {
            id(evaluation.envelope): envelope
            for evaluation, envelope in zip(answer.evaluations, reviewed, strict=False)
            if envelope is not evaluation.envelope
        }
        if changed:
            _put_back(flow, exchange, answer, changed)
        return answer

    async def _one(
        self, flow: Flow, exchange: Exchange, evaluation: Evaluation, body: str
    ) -> Envelope:
        """One failure counted into its session (``crosscall/review.py``)."""
        request = flow.request
        return await self.crosscall.review.envelope(
            evaluation.envelope,
            headers=request.headers,
            client=request.remote,
            method=request.method,
            route=exchange.route,
            path=request.raw_path,
            body=body,
        )


def _put_back(flow: Flow, exchange: Exchange, answer: Answer, changed: dict[int, Envelope]) -> None:
    """Reviewed envelopes in place of those built, and the protocol's body made again."""
    for evaluation in answer.evaluations:
        evaluation.envelope = changed.get(id(evaluation.envelope), evaluation.envelope)
    protocol, call = answer.protocol, flow.call
    if protocol is None or answer.rendered is None or call is None:
        return
    if answer.outcomes:  # errors in the protocol's shape, put back in place
        answer.outcomes = [(u, changed.get(id(e), e)) for u, e in answer.outcomes]
        answer.rendered = protocol.render(call, exchange, answer.outcomes)
    else:
        envelope = answer.evaluations[0].envelope
        answer.rendered = protocol.render_whole(call, envelope, answer_status(flow, exchange))


class Count:
    """Each envelope into the metrics: its code, its redactions, whether it repeats."""

    def __init__(self, metrics: Metrics, repeats: RepeatTracker) -> None:
        self.metrics = metrics
        self.repeats = repeats

    def __call__(self, flow: Flow, exchange: Exchange, answer: Answer) -> Answer:
        protocol = answer.protocol.name.value if answer.protocol else ProtocolName.HTTP.value
        trace_id = flow.trace.sampled_id if flow.trace is not None else None
        request = flow.request
        fingerprint = (
            f"{request.remote}|{request.method}|{request.path_qs}|{request.content_length}"
        )
        for evaluation in answer.evaluations:
            envelope = evaluation.envelope
            self.metrics.envelope(
                exchange.route,
                envelope,
                fallback=evaluation.match.rule.is_fallback,
                protocol=protocol,
                trace_id=trace_id,
            )
            self.metrics.redacted(evaluation.redactions)
            if self.repeats.seen_again(fingerprint, envelope.code):
                self.metrics.repeated(exchange.route, envelope.code, envelope.action.value)
        return answer


class Enrich:
    """What the route's OpenAPI document knows, added to an envelope going as plain HTTP: the
    field's constraints, the operation to call instead, a check first for a request that may
    have taken effect. A failure mend met itself has no upstream body, nor a call to cite."""

    def __init__(self, openapi: OpenAPIGate) -> None:
        self.openapi = openapi

    def __call__(self, flow: Flow, exchange: Exchange, answer: Answer) -> Answer:
        route, request = flow.route, flow.request
        if answer.rendered is not None or route is None or route.openapi is None:
            return answer
        if request.transport is None and tool_calls.REFUSED in request:  # no call was made
            return answer
        first = answer.evaluations[0]
        document = exchange.json if exchange.is_json else None
        call = flow.call if flow.failure is None else None
        sent = call.document() if call is not None else NOT_JSON  # the JSON body kept aside
        envelope = self.openapi.enrich(request, route, first.envelope, document, sent)
        if envelope.applied == "unknown" and envelope.action is Action.ESCALATE:
            envelope = self.openapi.check_first(request, route, envelope)  # not retryable
        first.envelope = envelope
        return answer


class Reply:
    """The response carrying the envelopes: the protocol's rendering, else the first envelope in
    the rendering ``Accept`` (or the route) asks for; with the headers every envelope gets
    (docs/contract.md §3): the upstream's headers but those of its old body, its connection and its
    software (``proxy/edge/envelope_headers.py``; redacted), ``Allow`` on a 405, the request id,
    the code, the upstream's status, ``Retry-After``; each name as the upstream spelt it."""

    def __init__(self, metrics: Metrics, negotiator: Negotiator) -> None:
        self.metrics = metrics
        self.negotiator = negotiator

    def __call__(self, flow: Flow, exchange: Exchange, answer: Answer) -> Answer:
        route, request = flow.route, flow.request
        envelope = answer.evaluations[0].envelope
        http_status, body, content_type = self._body(flow, answer, answer_status(flow, exchange))
        headers = CIMultiDict[str]()
        spelt = USUAL
        if flow.upstream is not None and flow.failure is None:
            self._kept(flow, headers)
            spelt = spelling(flow.upstream.headers)
        if envelope.category is Category.METHOD_NOT_ALLOWED and "Allow" not in headers:
            allow = allow_header(envelope.allowed_values)  # RFC 9110: a 405 says what is
            if allow is not None:
                headers["Allow"] = allow
        if content_type is not None:
            headers["Content-Type"] = content_type
        headers["X-Request-ID"] = envelope.request_id
        headers["X-Error-Code"] = safe_header_value(envelope.code)
        for name, value in flow.added():
            headers[name] = value
        if not (route and route.force_rendering):
            _vary_on_accept(headers)  # the body depends on Accept: caches must key on it
        headers["Server"] = "mend"  # never the default "Python/x aiohttp/y" banner
        if envelope.upstream_status is not None and envelope.upstream_status != http_status:
            headers["X-Upstream-Status"] = str(envelope.upstream_status)
        if envelope.retryable and envelope.retry_after_ms is not None:
            headers["Retry-After"] = str(math.ceil(envelope.retry_after_ms / 1000))
        if request.transport is None:  # an MCP tool's call: what its result is made of
            request[tool_calls.ENVELOPE] = envelope
        flow.response = EnvelopeResponse(
            status=http_status, body=body, headers=headers, spelt=spelt
        )
        flow.envelope = envelope
        return answer

    def _body(self, flow: Flow, answer: Answer, status: int) -> tuple[int, bytes, str | None]:
        """The status, body and content type: the protocol's, or the envelope rendered; a route
        with ``status: 200`` answers every error with a 200."""
        route = flow.route
        if answer.rendered is not None:
            rendered = answer.rendered
            return _status_for(route, rendered.status), rendered.body, rendered.content_type
        status = _status_for(route, status)
        default = route.rendering if route else Rendering.JSON
        rendering = (
            default
            if route and route.force_rendering
            else self.negotiator.choose(flow.request.headers.get("Accept"), default)
        )
        body, content_type = render(answer.evaluations[0].envelope, rendering, status)
        return status, body, content_type

    def _kept(self, flow: Flow, headers: CIMultiDict[str]) -> None:
        """The upstream's headers an envelope keeps (``envelope_headers.kept``), redacted (one
        that redaction changes is dropped); its cookies, challenges and MCP session as they
        came (a cookie set with a 401 or a 409 is the agent's own session), a redirect as
        rewritten, a CORS origin that echoes the request's as it came."""
        assert flow.upstream is not None
        upstream = flow.upstream
        origin = flow.request.headers.get("Origin")
        kinds: list[str] = []
        redactor = None
        for name, value in envelope_headers.kept(upstream.headers, upstream.status):
            lowered = name.lower()
            if lowered == "set-cookie":
                headers.add(name, value)
                continue
            text = _passing(flow, name, value, origin)
            if text is None:
                redactor = redactor or flow.redactor()
                scrubbed = redactor.scrub(value.strip())
                kinds.extend(scrubbed.kinds)
                # a value partly masked is no longer the header's syntax (``<an internal
                # service>; rel="next"``, an origin that is not one): dropped whole
                masked = scrubbed.text != value.strip()
                text = "" if masked else safe_header_value(scrubbed.text, limit=2048)
            if text:
                headers.add(name, text)
        self.metrics.redacted(kinds)


def _passing(flow: Flow, name: str, value: str, origin: str | None) -> str | None:
    """A kept header's value when it passes unredacted (a challenge, MCP's session, a CORS
    origin echoing the request's, a redirect rewritten to name mend); ``None`` otherwise."""
    lowered = name.lower()
    if lowered in _AS_SENT:
        return _as_sent(flow, name, value)
    if lowered == "access-control-allow-origin" and _echoes(value, origin):
        return safe_header_value(value, limit=len(value))
    if lowered in _REWRITTEN and (rewrite := flow.redirect()) is not None:
        rewritten = rewrite(name, value)
        if rewritten != value:
            return safe_header_value(rewritten, limit=2048)
    return None


def _echoes(value: str, origin: str | None) -> bool:
    """Whether an ``Access-Control-Allow-Origin`` says nothing the agent did not send: ``*``,
    ``null``, or the request's own ``Origin``, which redaction would mask when it is a
    ``localhost`` or private address (a browser agent in development) and break CORS."""
    value = value.strip()
    return value in ("*", "null") or (origin is not None and value == origin.strip())


def _vary_on_accept(headers: CIMultiDict[str]) -> None:
    """``Accept`` among the upstream's ``Vary`` (kept: CORS varies on ``Origin``), in its
    field; ``Vary: Accept`` when it sent none. ``*`` already varies on everything."""
    values = headers.getall("Vary", ())
    tokens = {t.strip().lower() for value in values for t in value.split(",")}
    if not values:
        headers["Vary"] = "Accept"
    elif not tokens & {"accept", "*"}:
        headers["Vary"] = ", ".join([*values, "Accept"])


def _as_sent(flow: Flow, name: str, value: str) -> str:
    """A header the client reads or echoes as it came: a challenge (its ``resource_metadata``
    naming mend, ``proxy/edge/redirect.py``), MCP's session id and revision."""
    if name.lower() == "www-authenticate" and (rewrite := flow.redirect()) is not None:
        value = rewrite(name, value)
    return safe_header_value(value, limit=len(value))


def _status_for(route: Route | None, status: int) -> int:
    """The HTTP status an error goes with: 200 on a route with ``status: 200``."""
    return 200 if route is not None and route.status == 200 and status >= 400 else status
