"""Retries: a failed try sent again before the agent sees it, as Envoy's ``retry_policy``.

``Retrier.run`` makes the tries of one request (``Proxy._attempt``: forward, then respond); a
try that fails in a way the route's ``retries:`` names (docs/retries.md) is sent again only if
the envelope the agent would get says ``retryable`` (docs/contract.md §1: nothing was sent, the
upstream said it did not process it, or the request is safe to repeat), so mend and its
envelope never disagree. Then also: a try left before ``read_timeout`` from the first try, a
body kept whole (``proxy/edge/kept_body.py``), the operation's circuit closed, and a place in the
route's budget. Between two tries mend waits what the upstream stated, when it is short, else an
exponential back-off with full jitter. A response's failure is judged in ``Proxy._answer`` once
its envelope is built (``absorb``); mend's own (refused, reset, timed out) here.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from proxy.config.retries import BackOff, Outcome, RetryBudget
from proxy.edge.failures import (
    ProxyFailure,
    UpstreamProtocolError,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from proxy.edge.kept_body import KeptBody
from proxy.edge.relay import STARTED
from proxy.edge.upstream.errors import Disconnected
from proxy.observation.metrics import Metrics
from proxy.policy.evaluate import Answer
from proxy.policy.exchange import Exchange
from proxy.policy.retry.resend import AMBIGUOUS_STATUSES, Resend, resend
from proxy.policy.retry.retry import retry_after_ms
from proxy.policy.retry.stated_wait import stated_wait_ms
from proxy.runtime.circuit_gate import CircuitGate
from proxy.runtime.own_failures import OwnFailures
from proxy.runtime.tries import Tries

if TYPE_CHECKING:
    from proxy.runtime.flow import Flow

#: One try: the request forwarded with this body, and its answer given or raised.
Attempt = Callable[["Flow", AsyncIterator[bytes] | None], Awaitable[None]]


class Again(Exception):
    """The try's answer is not given: the request goes again after ``wait_s``."""

    def __init__(self, retry: Retry) -> None:
        super().__init__(retry)
        self.retry = retry


@dataclass(frozen=True, slots=True)
class Retry:
    """A retry decided: why (a ``mend_retries_total`` reason), and the wait before it."""

    reason: str
    wait_s: float


class Budget:
    """Each route's requests and retries in flight (Envoy's ``retry_budget``), in this process."""

    def __init__(self) -> None:
        self.requests: dict[str, int] = {}
        self.retries: dict[str, int] = {}

    def enter(self, route: str) -> None:
        self.requests[route] = self.requests.get(route, 0) + 1

    def leave(self, route: str) -> None:
        _drop(self.requests, route)

    def take(self, route: str, budget: RetryBudget) -> bool:
        """A place for one retry, if the budget has one."""
        active = self.retries.get(route, 0)
        allowed = max(budget.min_concurrent, budget.percent / 100 * self.requests.get(route, 0))
        if active >= allowed:
            return False
        self.retries[route] = active + 1
        return True

    def give(self, route: str) -> None:
        _drop(self.retries, route)


def _drop(counts: dict[str, int], route: str) -> None:
    left = counts.get(route, 1) - 1
    if left > 0:
        counts[route] = left
    else:
        counts.pop(route, None)  # a table no larger than the routes in flight


class Retrier:
    """The tries of every request, and the budget they share."""

    def __init__(
        self,
        metrics: Metrics,
        own: OwnFailures,
        gate: CircuitGate,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.metrics, self.own, self.gate, self.jitter = metrics, own, gate, jitter
        self.budget = Budget()

    async def run(self, flow: Flow, attempt: Attempt, body: AsyncIterator[bytes] | None) -> None:
        """Every try of ``flow``'s request, until one is answered: the first here (a success
        costs no more than this), the retries in ``_retries``."""
        runtime = flow.runtime
        assert runtime is not None
        policy, route = runtime.retries, runtime.route
        if policy is None or "Upgrade" in flow.request.headers:  # a tunnel is never resent
            await attempt(flow, body)
            return
        began, timeouts = time.perf_counter(), runtime.try_timeout
        kept = KeptBody(body, policy.body_max_bytes) if body is not None else None
        deadline, statuses = began + route.read_timeout, runtime.retry_statuses
        tries = flow.tries = Tries(policy, began, timeouts, deadline, statuses, kept)
        flow.timeouts = timeouts
        budget, name = self.budget, route.name
        budget.enter(name)
        try:
            retry = await self._try(flow, tries, attempt)
            if retry is not None:
                await self._retries(flow, tries, attempt, retry)
        finally:
            budget.leave(name)

    async def _try(self, flow: Flow, tries: Tries, attempt: Attempt) -> Retry | None:
        """One try: the retry to make after it, or ``None`` when it was answered (a failure not
        retried is raised, to be answered as mend's own)."""
        kept = tries.kept
        try:
            await attempt(flow, kept.send() if kept is not None else None)
        except Again as again:
            return again.retry
        except ProxyFailure as failure:
            if (decided := await self._failed(flow, tries, failure)) is None:
                raise
            return decided
        return None

    async def _retries(self, flow: Flow, tries: Tries, attempt: Attempt, retry: Retry) -> None:
        """Try again while the policy says so; ``retry`` is the retry under way (its place in
        the budget given back once it ended)."""
        route = flow.exchange.route
        while True:
            try:
                await asyncio.sleep(retry.wait_s)
                flow.again(tries.timeout())
                await self._still_closed(flow, retry)
                tries.count += 1
                try:
                    following = await self._try(flow, tries, attempt)
                except ProxyFailure:
                    self._ended(route, retry, "failed")
                    raise
            finally:
                self.budget.give(route)
            failed = following is not None or flow.envelope is not None
            self._ended(route, retry, "failed" if failed else "succeeded")
            if following is None:
                return
            retry = following

    async def _still_closed(self, flow: Flow, retry: Retry) -> None:
        """``CircuitOpen`` (answered as the circuit's) when another request opened the
        operation's circuit while this one waited to be tried again: the retry is not sent."""
        route = flow.route
        if flow.operation is None or route is None or not await self.gate.open(flow):
            return
        self.metrics.retries_declined.labels(route.name, retry.reason, "circuit").inc()
        await self.gate.closed(flow, route)

    def _ended(self, route: str, retry: Retry, outcome: str) -> None:
        """A retry ended: counted by why it was made and how it ended."""
        self.metrics.retries.labels(route, retry.reason, outcome).inc()

    async def absorb(self, flow: Flow, exchange: Exchange, answer: Answer) -> None:
        """``Again`` when the try's answer is one the policy sends again: a status it names,
        every envelope retryable, the stated wait short enough; else the answer stands."""
        tries, status = flow.tries, exchange.status
        if tries is None or status not in tries.statuses or tries.count >= tries.policy.attempts:
            return
        envelopes = [evaluation.envelope for evaluation in answer.evaluations]
        retryable = bool(envelopes) and all(envelope.retryable for envelope in envelopes)
        if status in AMBIGUOUS_STATUSES:  # the gateway got no answer: it may have taken effect
            safe = resend(exchange.method, exchange.request_headers, exchange.retry_safe)
            retryable = retryable and safe is not Resend.UNSAFE
        stated = _stated(exchange, [e.retry_after_ms or 0 for e in envelopes], flow)
        retry = await self._decide(flow, tries, f"status_{status}", retryable, stated)
        if retry is not None:
            raise Again(retry)

    async def _failed(self, flow: Flow, tries: Tries, failure: ProxyFailure) -> Retry | None:
        """The retry after mend's own failure, or ``None``: answer it. A response the agent
        has begun to receive is never sent again."""
        outcome = _outcome(failure)
        if outcome is None or tries.count >= tries.policy.attempts or flow.request.get(STARTED):
            return None
        if outcome not in tries.policy.retry_on:
            return None
        reason = outcome.replace("-", "_")
        envelope = self.own.evaluation(flow, flow.exchange, failure).envelope
        return await self._decide(flow, tries, reason, envelope.retryable, None)

    async def _decide(
        self,
        flow: Flow,
        tries: Tries,
        reason: str,
        retryable: bool,
        stated_ms: int | None,
    ) -> Retry | None:
        """The next try, or ``None`` with why it is not made (counted)."""
        policy, route, kept = tries.policy, flow.exchange.route, tries.kept
        if stated_ms is None:
            wait = back_off_s(policy.back_off, tries.count - 1, self.jitter())
        else:
            wait = stated_ms / 1000
        why = None
        if not retryable:
            why = "unsafe"
        elif stated_ms is not None and stated_ms > policy.retry_after_max_ms:
            why = "wait"
        elif kept is not None and not kept.replayable:
            why = "body"
        elif time.perf_counter() + wait >= tries.deadline:
            why = "deadline"
        elif await self.gate.open(flow):
            why = "circuit"
        elif not self.budget.take(route, policy.budget):
            why = "budget"
        if why is not None:
            self.metrics.retries_declined.labels(route, reason, why).inc()
            return None
        return Retry(reason, wait)


def back_off_s(back_off: BackOff, retry: int, jitter: float) -> float:
    """Seconds before retry ``retry`` (from 0): full jitter (``jitter`` in [0, 1)) over an
    exponential ceiling, as Envoy's ``retry_back_off``."""
    ceiling_ms: int = min(back_off.max_ms, back_off.base_ms * 2**retry)
    return jitter * ceiling_ms / 1000


def _outcome(failure: ProxyFailure) -> Outcome | None:
    """What a try that got no usable answer ended in, as ``retry_on`` names it."""
    if isinstance(failure, UpstreamUnreachable):
        return "connect-failure"
    if isinstance(failure, UpstreamTimeout):
        return "connect-failure" if failure.applied == "no" else "timeout"
    if isinstance(failure, UpstreamProtocolError) and isinstance(failure.__cause__, Disconnected):
        return "reset"
    return None


def _stated(exchange: Exchange, waits: list[int], flow: Flow) -> int | None:
    """The wait the upstream stated (its headers, its body, a rule reading it), or ``None``:
    the envelopes' waits are the configured default."""
    if retry_after_ms(exchange.headers) is not None or stated_wait_ms(exchange) is not None:
        return max(waits)
    default = flow.generation.options.retry_after_default_ms
    return max(waits) if any(wait != default for wait in waits) else None
