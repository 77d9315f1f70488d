"""An event stream (MCP over streamable HTTP) passed event by event as each arrives.

An event carrying an error is replaced by its protocol's answer, every other one passes
unchanged at once (``proxy/policy/protocols/sse.py``). A stream that breaks before the call was
answered gets one last event with mend's own failure (a hung tool: ``UPSTREAM_TIMEOUT``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from aiohttp import web

from proxy.config.choices import ProtocolName
from proxy.edge.failures import UpstreamProtocolError, translated
from proxy.edge.upstream import UpstreamError
from proxy.policy import json_depth as nesting
from proxy.policy.evaluate import Evaluation, answer
from proxy.policy.exchange import NOT_JSON
from proxy.policy.protocols.base import Call
from proxy.policy.protocols.sse import Event, EventRewriter
from proxy.policy.retry.retry_safety import LISTING_MARKER
from proxy.policy.rules.ruleset import RuleSet
from proxy.runtime import envelope_steps
from proxy.runtime.envelope_steps import Step
from proxy.runtime.own_failures import OwnFailures

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from proxy.runtime.envelope_steps import Count
    from proxy.runtime.flow import Flow

    Stream = Callable[
        [Flow, bytes, EventRewriter | None, Callable[[UpstreamError], bytes] | None],
        Awaitable[web.StreamResponse],
    ]


def _every_event(_: bytes) -> bool:
    return True


def lists_tools(call: Call | None) -> bool:
    """Whether a call may be an MCP ``tools/list`` (a byte scan of the kept body, no parse)."""
    return (
        call is not None
        and call.protocol is not None
        and call.protocol.name is ProtocolName.MCP
        and call.holds(LISTING_MARKER)
    )


class EventStream:
    """The rewriting of one event stream; ``run`` relays it and says how it ended."""

    def __init__(
        self,
        flow: Flow,
        ruleset: RuleSet,
        steps: tuple[Step, ...],
        count: Count,
        own: OwnFailures,
    ) -> None:
        call = flow.call
        assert call is not None
        assert call.protocol is not None
        self.flow, self.call, self.protocol = flow, call, call.protocol
        self.ruleset, self.own = ruleset, own
        #: the envelope steps an event's errors take (the review, the count, the unexplained
        #: shapes): each is then rendered into its own event
        self.steps = steps
        self.count = count
        self.retry_safety = own.retry_safety
        #: every event is read: the tools' annotations are in one (an MCP ``tools/list``)
        self.listing = lists_tools(call)
        #: the evaluations of the errors rewritten so far
        self.found: list[Evaluation] = []
        #: an event carried a response (a result or an error)
        self.answered = False
        exchange, upstream = flow.exchange, flow.upstream
        assert upstream is not None
        exchange.status, exchange.headers = upstream.status, upstream.headers
        exchange.content_type, exchange.protocol = "application/json", self.protocol.name.value

    async def run(self, stream: Stream) -> None:
        """Relay the stream through the rewriter, then say on the flow how it ended."""
        flow = self.flow
        marker = _every_event if self.listing else self.protocol.may_hold_errors

        def wants(raw: bytes) -> bool:
            self.answered = self.answered or b'"result"' in raw or b'"error"' in raw
            return marker(raw)

        rewriter = EventRewriter(self._rewrite, wants)
        try:
            response = await stream(flow, b"", rewriter, self._broken)
        except ConnectionResetError:
            if not self.found:
                raise
            # the agent read its error and hung up before the stream ended (an SDK client
            # closes once it has its answer): still an error, with its code, not a bare 499
            flow.hung_up()
            flow.envelope = self.found[0].envelope
            return
        if self.found:
            flow.answered(response, "envelope", self.found[0].envelope)
        else:
            flow.answered(response, "passthrough")

    async def _rewrite(self, event: Event) -> bytes | None:
        if event.event not in ("", "message"):
            return None
        document = nesting.loads(event.data)
        if document is NOT_JSON:
            return None
        flow, exchange = self.flow, self.flow.exchange
        if self.listing:
            self.retry_safety.learn(exchange.route, document)
        one = replace(exchange, json=document, text=event.data, queried={})
        try:
            made = answer(
                self.protocol, self.call, one, self.ruleset, flow.redactor(), flow.options()
            )
            if made is None or made.rendered is None:
                return None
            # the cross-call view and the counts, as for a JSON answer
            made = await envelope_steps.run(self.steps, flow, one, made)
        except Exception as exc:  # a bug must not end the stream the agent is reading
            self.own.bug(exc)
            return None
        if made.rendered is None:
            return None
        if not self.found:
            exchange.text = event.data  # for the log line, masked there
        self.found.extend(made.evaluations)
        return event.with_data(made.rendered.body.decode("utf-8"))

    def _broken(self, exc: UpstreamError) -> bytes:
        """The stream broke before the call was answered: an event answering it with mend's own
        failure (a hung tool: UPSTREAM_TIMEOUT, applied unknown)."""
        if self.answered:
            return b""
        own = replace(self.flow.exchange, text="")  # the stream's exchange keeps the 200
        try:
            failure = translated(exc) or UpstreamProtocolError(type(exc).__name__)
            failed = self.own.answer(self.flow, own, failure)
        except Exception as bug:  # the agent still gets the abort
            self.own.bug(bug)
            return b""
        if failed.rendered is None:
            return b""
        self.count(self.flow, own, failed)
        self.found.extend(failed.evaluations)
        return b"event: message\ndata: " + failed.rendered.body + b"\n\n"
