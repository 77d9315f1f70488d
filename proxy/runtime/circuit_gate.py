"""The operation's circuit on the request path (docs/contract.md §7): asked before the request goes
upstream, told how the upstream answered once the agent has its answer (``proxy/policy/crosscall/
circuit.py`` keeps the counts). Circuits are opt-in; with them off nothing here runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from proxy.edge.failures import CircuitOpen
from proxy.edge.openapi_gate import OpenAPIGate
from proxy.policy.crosscall.circuit import Circuits, LastError
from proxy.policy.crosscall.operation import operation_key
from proxy.policy.retry.retry import retry_after_ms

if TYPE_CHECKING:
    from proxy.config.route import Route
    from proxy.runtime.flow import Flow


class CircuitGate:
    """The circuits, seen from one request."""

    def __init__(self, circuits: Circuits, openapi: OpenAPIGate) -> None:
        self.circuits = circuits
        self.openapi = openapi

    async def closed(self, flow: Flow, route: Route) -> None:
        """``CircuitOpen`` when the request's operation has its circuit open; else the request
        goes on, its operation noted for what its answer tells the circuit."""
        request = flow.request
        template = self.openapi.template(request, route) if route.openapi is not None else None
        key = operation_key(route.name, request.method, request.rel_url.raw_path, template)
        flow.operation = key
        blocked = await self.circuits.blocked(route.name, key)
        if blocked is not None:
            raise CircuitOpen(
                f"circuit open for {blocked.wait_ms} ms more",
                wait_ms=blocked.wait_ms,
                blocked=blocked,
            )

    async def open(self, flow: Flow) -> bool:
        """Whether the operation's circuit is open now (a retry is then not made)."""
        key = flow.operation
        if key is None or not self.circuits.enabled:
            return False
        return await self.circuits.blocked(flow.exchange.route, key) is not None

    async def answered(self, flow: Flow, status: int) -> None:
        """A response head arrived: a status that does not count closes a dirty circuit."""
        key = flow.operation
        if key and self.circuits.dirty(key) and not self.circuits.counts(status):
            await self.circuits.succeeded(key)

    async def told(self, flow: Flow) -> None:
        """Tell the operation's circuit how the upstream answered: only unreachable, timed out,
        or a status of ``circuit.statuses`` counts; any other answer the upstream gave resets
        the count (a success did already, in ``answered``)."""
        key, failure, exchange = flow.operation, flow.failure, flow.exchange
        if key is None:
            return
        status = exchange.status
        if status is None and flow.outcome == "passthrough" and flow.response is not None:
            status = flow.response.status  # a streamed answer is passed with its own status
        if failure is not None:
            if not failure.upstream:
                return  # mend refused it, or the circuit was open: the upstream was not asked
            if failure.reason not in ("unreachable", "timeout"):
                await self.circuits.succeeded(key)  # it answered, if badly
                return
            reason = failure.reason
        elif status is not None and self.circuits.counts(status):
            reason = f"status {status}"
        else:
            return
        last = None
        if (envelope := flow.envelope) is not None:
            last = LastError(
                envelope.code, envelope.message, envelope.category, envelope.upstream_status
            )
        # the wait the upstream itself asked for (Retry-After, a rate-limit reset), not a default
        wait = retry_after_ms(exchange.headers) if exchange.headers else None
        await self.circuits.failed(exchange.route, key, reason, last, wait)
