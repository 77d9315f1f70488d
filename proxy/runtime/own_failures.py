"""The envelope of a failure mend met itself: the upstream unreachable or too slow, a request
refused, a bug. Its rule is one of mend's own (``proxy/policy/rules/own_errors.yaml``); it goes in
the agent's protocol when the agent speaks one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from structlog.typing import FilteringBoundLogger

from proxy.edge.failures import ProxyBug, ProxyFailure
from proxy.observation.metrics import Metrics
from proxy.policy.crosscall.circuit import Blocked, open_answer
from proxy.policy.evaluate import Answer, Evaluation, described, rewrite
from proxy.policy.exchange import Exchange
from proxy.policy.protocols.base import Protocol
from proxy.policy.protocols.detect import Detector
from proxy.policy.retry.retry_safety import RetrySafety
from proxy.policy.rules.rule import Match
from proxy.policy.rules.rulecheck import OWN_FAILURE_VARS

if TYPE_CHECKING:
    from proxy.runtime.flow import Flow


class OwnFailures:
    """Envelopes for what went wrong on mend's side of the request."""

    def __init__(
        self,
        metrics: Metrics,
        detector: Detector,
        retry_safety: RetrySafety,
        log: FilteringBoundLogger,
    ) -> None:
        self.metrics = metrics
        self.detector = detector
        self.retry_safety = retry_safety
        self.log = log

    def answer(self, flow: Flow, exchange: Exchange, failure: ProxyFailure) -> Answer:
        """The envelope of ``failure``, in the agent's protocol when it speaks one."""
        if failure.upstream:
            self.metrics.upstream_failures.labels(exchange.route, failure.reason).inc()
        call = flow.call
        protocol = self.detector.resolve(call) if call is not None else None
        evaluation = self._evaluation(flow, exchange, failure, protocol)
        if protocol is None or call is None:
            return Answer(None, [evaluation])
        rendered = protocol.render_whole(call, evaluation.envelope, failure.status)
        return Answer(rendered, [evaluation], protocol)

    def evaluation(self, flow: Flow, exchange: Exchange, failure: ProxyFailure) -> Evaluation:
        """The envelope of ``failure`` as built, counted nowhere: what the agent would get, and
        what a retry policy asks before sending the request again (``runtime/retries.py``)."""
        protocol = self.detector.resolve(flow.call) if flow.call is not None else None
        return self._evaluation(flow, exchange, failure, protocol)

    def _evaluation(
        self, flow: Flow, exchange: Exchange, failure: ProxyFailure, protocol: Protocol | None
    ) -> Evaluation:
        exchange.status = None
        exchange.applied = failure.applied
        rule = flow.generation.loaded.engine.own[failure.rule]
        found: dict[str, Any] = {}
        for name in OWN_FAILURE_VARS & failure.context.keys():
            found[name] = failure.context[name]
        call = flow.call
        if protocol is not None and call is not None:
            described(protocol, call, exchange)
        if failure.applied == "unknown":
            judge(self.retry_safety, flow, exchange)
        evaluation = rewrite(Match(rule, found), exchange, flow.redactor(), flow.options())
        if isinstance(blocked := failure.context.get("blocked"), Blocked):
            evaluation.envelope = open_answer(evaluation.envelope, blocked)
        return evaluation

    def bug(self, exc: Exception) -> ProxyBug:
        """A bug in mend, logged with its traceback; the agent gets ``INTERNAL_PROXY_ERROR``."""
        self.log.exception("mend_bug", error=type(exc).__name__)
        return ProxyBug(type(exc).__name__)


def judge(
    retry_safety: RetrySafety, flow: Flow, exchange: Exchange, with_call: bool = True
) -> None:
    """What besides its method says whether a request that may have taken effect is safe to send
    again: the route's ``retry_safe:``, an MCP tool's annotations, the protocol."""
    call = flow.call if with_call else None
    sent = call.document() if call is not None else None
    verdict = retry_safety.verdict(flow.route, exchange, sent)
    exchange.retry_safe, exchange.destructive = verdict.safe, verdict.destructive
