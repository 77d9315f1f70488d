"""A circuit breaker per route (CONTRACT §3, §7): an upstream that keeps failing is spared.

After ``circuit.failures`` consecutive upstream failures (unreachable, timed out, or a status of
``circuit.statuses``) the route's circuit opens for ``circuit.open_s``: requests are answered
``UPSTREAM_UNAVAILABLE`` at once, with ``retry_after_ms`` = the time left, and the upstream is not
touched. Then one probe request goes through (half-open): its success closes the circuit, its
failure opens it again.

The counts live in the state store, so with Redis every replica shares them. A success must not
pay a round trip: each replica keeps a local view per route, and only talks to the store for a
success when that view says failures were seen since the last success (to reset the count).
Circuits other replicas opened are learned by a look at the store at most every
``circuit.refresh_s`` per route, started by a request but never awaited by it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

from prometheus_client import CollectorRegistry, Gauge
from structlog.typing import FilteringBoundLogger

from proxy.crosscall.config import CircuitSettings
from proxy.crosscall.guard import Guard
from proxy.crosscall.store import StateStore


class State(IntEnum):
    """``mend_circuit_state``'s values."""

    CLOSED = 0
    OPEN = 1
    HALF_OPEN = 2


@dataclass(slots=True)
class _View:
    #: epoch ms the circuit is open until (0: closed, as far as this replica knows)
    open_until_ms: int = 0
    #: failures seen since the last success: a success must reset the shared count
    dirty: bool = False
    #: monotonic time of the next look at the store
    refresh_at: float = 0.0
    #: this replica sends the half-open probe, until this monotonic time at the latest (a probe
    #: that never reports, its request refused before it went upstream, is given up)
    probing: bool = False
    probe_until: float = 0.0


def _now_ms() -> int:
    return int(time.time() * 1000)


class Circuits:
    def __init__(
        self,
        settings: CircuitSettings,
        store: StateStore,
        guard: Guard,
        registry: CollectorRegistry,
        logger: FilteringBoundLogger,
        *,
        shared: bool,
    ) -> None:
        self.settings = settings
        self.enabled = settings.failures > 0
        self.store = store
        self.guard = guard
        self.log = logger
        #: the store is shared with other replicas: look at it now and then
        self.shared = shared
        self._views: dict[str, _View] = {}
        self._refreshing: set[asyncio.Task[None]] = set()
        self.gauge = Gauge(
            "mend_circuit_state",
            "Each route's circuit: 0 closed, 1 open (answered at once), 2 half-open (probing).",
            ["route"],
            registry=registry,
        )

    def start(self, routes: Iterable[str]) -> None:
        """Every route's circuit shows in ``mend_circuit_state``, closed, from the start."""
        for route in routes:
            self._set(route, State.CLOSED)

    def counts(self, status: int) -> bool:
        """Whether an upstream answer with this status is a failure for the circuit."""
        return self.enabled and status in self.settings.statuses

    def dirty(self, route: str) -> bool:
        """Whether a success on the route has something to tell the store: failures were seen
        since the last success, or the circuit is open or probing. A dictionary look-up."""
        view = self._views.get(route)
        return view is not None and (view.dirty or bool(view.open_until_ms) or view.probing)

    async def blocked_ms(self, route: str) -> int | None:
        """How long the route's circuit stays open (ms; the request is answered at once), or
        ``None``: send the request (the circuit is closed, or this request is the probe)."""
        if not self.enabled:
            return None
        view = self._views.get(route)
        if view is None:
            view = self._views[route] = _View()
        now = time.monotonic()
        if self.shared and now >= view.refresh_at:
            self._refresh(route, view)
        if view.probing and now > view.probe_until:
            view.probing = False
        if not view.open_until_ms or view.probing:
            return None if not view.probing else 1000
        left = view.open_until_ms - _now_ms()
        if left > 0:
            return left
        # open time over: one probe, across every replica sharing the store
        probe_ms = int(self.settings.open_s * 1000)
        taken = await self.guard.run(
            "circuit", self.store.circuit_probe(route, probe_ms, _now_ms())
        )
        if taken is False:
            return min(probe_ms, 1000)
        view.probing, view.probe_until = True, time.monotonic() + self.settings.open_s
        self._set(route, State.HALF_OPEN)
        return None

    async def failed(self, route: str, reason: str) -> None:
        """An upstream failure on the route."""
        if not self.enabled:
            return
        view = self._views.setdefault(route, _View())
        view.dirty = True
        was_open = bool(view.open_until_ms)
        until = await self.guard.run(
            "circuit",
            self.store.circuit_failure(
                route, self.settings.failures, int(self.settings.open_s * 1000), _now_ms()
            ),
        )
        if until is None:
            return
        if until and (until != view.open_until_ms or view.probing):
            view.open_until_ms, view.probing = until, False
            self._set(route, State.OPEN)
            self.log.warning(
                "circuit_open",
                route=route,
                reason=reason,
                open_ms=until - _now_ms(),
                after=("probe" if was_open else f"{self.settings.failures} failures"),
            )

    async def succeeded(self, route: str) -> None:
        """An upstream answer that is not a failure: free unless failures were seen."""
        view = self._views.get(route)
        if view is None or not (view.dirty or view.open_until_ms):
            return
        done = await self.guard.run("circuit", self.store.circuit_success(route))
        if done is None and view.probing:
            return  # the store did not hear it: the circuit stays as the others see it
        was_open = bool(view.open_until_ms)
        view.dirty, view.open_until_ms, view.probing = False, 0, False
        if was_open:
            self._set(route, State.CLOSED)
            self.log.info("circuit_closed", route=route)

    def _set(self, route: str, state: State) -> None:
        self.gauge.labels(route).set(state.value)

    def _refresh(self, route: str, view: _View) -> None:
        view.refresh_at = time.monotonic() + self.settings.refresh_s
        task = asyncio.get_running_loop().create_task(self._look(route, view))
        self._refreshing.add(task)
        task.add_done_callback(self._refreshing.discard)

    async def _look(self, route: str, view: _View) -> None:
        until = await self.guard.run("circuit", self.store.circuit_state(route))
        if until is None or view.probing:
            return
        if until and until != view.open_until_ms:
            view.open_until_ms = until
            self._set(route, State.OPEN)
            self.log.warning(
                "circuit_open", route=route, reason="shared", open_ms=until - _now_ms()
            )
        elif not until and view.open_until_ms and view.open_until_ms > _now_ms():
            view.open_until_ms = 0  # another replica's probe closed it
            self._set(route, State.CLOSED)
            self.log.info("circuit_closed", route=route, reason="shared")
