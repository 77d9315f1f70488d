"""A circuit breaker per operation (docs/contract.md §3, §7): an operation that keeps failing is
spared.

Off unless ``circuit.failures`` is set: a circuit answers without asking the upstream, so it can
turn an answer that would have succeeded into an error, and mend changes nothing by default.

A circuit covers one operation (``operation.py``: the documented OpenAPI operation, else method
and path shape), never a whole route, so a failing endpoint leaves the others untouched. Only
answers that say the upstream is unreachable or overloaded count: mend's own unreachable and
timed-out, and the statuses of ``circuit.statuses`` (5xx only; never a 4xx, never a tool's
``isError``, which comes in a 200). After ``circuit.failures`` consecutive ones the circuit opens
for the longer of ``circuit.open_s`` and the wait the last failure asked for (``Retry-After``,
rate-limit reset): requests of that operation are answered at once with the last real error's
code and message (``Blocked``), ``retry_after_ms`` = the time left, and the upstream is not
touched. Then one probe request goes through (half-open): its success closes the circuit, its
failure opens it again.

The counts live in the state store, so with Redis every replica shares them (the last error's
words are this replica's own). A success must not pay a round trip: each replica keeps a local
view per operation (at most ``MAX_VIEWS``), and only talks to the store for a success when that
view says failures were seen since the last success (to reset the count). Circuits other replicas
opened are learned by a look at the store at most every ``circuit.refresh_s`` per operation,
started by a request but never awaited by it.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

from prometheus_client import CollectorRegistry, Gauge
from structlog.typing import FilteringBoundLogger

from proxy.config.crosscall import CircuitSettings
from proxy.policy.crosscall.guard import Guard
from proxy.policy.crosscall.store import StateStore
from proxy.policy.envelope.model import Category, Envelope


class State(IntEnum):
    """``mend_circuit_state``'s values."""

    CLOSED = 0
    OPEN = 1
    HALF_OPEN = 2


#: operations whose circuit a replica keeps a local view of; closed ones are forgotten first
MAX_VIEWS = 10_000


@dataclass(frozen=True, slots=True)
class LastError:
    """The last real error an operation's circuit counted: what its open answer repeats."""

    code: str
    message: str
    category: Category
    upstream_status: int | None


@dataclass(frozen=True, slots=True)
class Blocked:
    """An open circuit's answer: how long it stays open, and what it saw last."""

    wait_ms: int
    operation: str
    failures: int
    last: LastError | None


@dataclass(slots=True)
class _View:
    route: str
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
    last: LastError | None = None

    @property
    def state(self) -> State:
        if self.probing:
            return State.HALF_OPEN
        return State.OPEN if self.open_until_ms else State.CLOSED


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
        #: per route, its operations whose circuit is not closed (for the route's gauge)
        self._not_closed: dict[str, dict[str, State]] = {}
        self._refreshing: set[asyncio.Task[None]] = set()
        self.gauge = Gauge(
            "mend_circuit_state",
            "The worst circuit of each route's operations: 0 all closed, 1 one open (answered "
            "at once), 2 one half-open (probing).",
            ["route"],
            registry=registry,
        )

    def start(self, routes: Iterable[str]) -> None:
        """Every route shows in ``mend_circuit_state``, closed, from the start."""
        for route in routes:
            self.gauge.labels(route).set(State.CLOSED.value)

    def counts(self, status: int) -> bool:
        """Whether an upstream answer with this status is a failure for the circuit."""
        return self.enabled and status in self.settings.statuses

    def dirty(self, key: str) -> bool:
        """Whether a success of the operation has something to tell the store: failures were
        seen since the last success, or its circuit is open or probing. A dictionary look-up."""
        view = self._views.get(key)
        return view is not None and (view.dirty or bool(view.open_until_ms) or view.probing)

    def _view(self, route: str, key: str) -> _View:
        view = self._views.get(key)
        if view is None:
            if len(self._views) >= MAX_VIEWS:
                self._forget()
            view = self._views[key] = _View(route)
        return view

    def _forget(self) -> None:
        """Room for more views: a tenth of the table goes at once (so the scan is paid once per
        thousand new operations), the oldest closed views first, else the oldest of all."""
        room = max(1, MAX_VIEWS // 10)
        closed = [k for k, v in self._views.items() if v.state is State.CLOSED and not v.dirty]
        for key in closed[:room] or list(itertools.islice(self._views, room)):
            view = self._views.pop(key)
            self._set(key, view.route, State.CLOSED)

    async def blocked(self, route: str, key: str) -> Blocked | None:
        """The open circuit's answer (the request is answered at once), or ``None``: send the
        request (the circuit is closed, or this request is the probe)."""
        if not self.enabled:
            return None
        view = self._view(route, key)
        now = time.monotonic()
        if self.shared and now >= view.refresh_at:
            self._refresh(key, view)
        if view.probing and now > view.probe_until:
            view.probing = False
        if not view.open_until_ms:
            return None
        if view.probing:
            return self._blocked(key, view, 1000)
        left = view.open_until_ms - _now_ms()
        if left > 0:
            return self._blocked(key, view, left)
        # open time over: one probe, across every replica sharing the store
        probe_ms = int(self.settings.open_s * 1000)
        taken = await self.guard.run("circuit", self.store.circuit_probe(key, probe_ms, _now_ms()))
        if taken is False:
            return self._blocked(key, view, min(probe_ms, 1000))
        view.probing, view.probe_until = True, time.monotonic() + self.settings.open_s
        self._set(key, view.route, State.HALF_OPEN)
        return None

    def _blocked(self, key: str, view: _View, wait_ms: int) -> Blocked:
        return Blocked(wait_ms, key.split(" ", 1)[1], self.settings.failures, view.last)

    async def failed(
        self, route: str, key: str, reason: str, last: LastError | None, wait_ms: int | None
    ) -> None:
        """An upstream failure of the operation: ``last`` is the answer it got, ``wait_ms`` the
        wait the upstream asked for (the circuit stays open at least that long)."""
        if not self.enabled:
            return
        view = self._view(route, key)
        view.dirty = True
        view.last = last or view.last
        was_open = bool(view.open_until_ms)
        open_ms = max(int(self.settings.open_s * 1000), wait_ms or 0)
        until = await self.guard.run(
            "circuit", self.store.circuit_failure(key, self.settings.failures, open_ms, _now_ms())
        )
        if until is None:
            return
        if until and (until != view.open_until_ms or view.probing):
            view.open_until_ms, view.probing = until, False
            self._set(key, route, State.OPEN)
            self.log.warning(
                "circuit_open",
                route=route,
                operation=key.split(" ", 1)[1],
                reason=reason,
                open_ms=until - _now_ms(),
                after=("probe" if was_open else f"{self.settings.failures} failures"),
            )

    async def succeeded(self, key: str) -> None:
        """An upstream answer that is not a failure: free unless failures were seen."""
        view = self._views.get(key)
        if view is None or not (view.dirty or view.open_until_ms):
            return
        done = await self.guard.run("circuit", self.store.circuit_success(key))
        if done is None and view.probing:
            return  # the store did not hear it: the circuit stays as the others see it
        was_open = bool(view.open_until_ms)
        view.dirty, view.open_until_ms, view.probing, view.last = False, 0, False, None
        if was_open:
            self._set(key, view.route, State.CLOSED)
            self.log.info("circuit_closed", route=view.route, operation=key.split(" ", 1)[1])

    def _set(self, key: str, route: str, state: State) -> None:
        """One operation's state; the route's gauge shows its worst operation."""
        others = self._not_closed.setdefault(route, {})
        if state is State.CLOSED:
            others.pop(key, None)
        else:
            others[key] = state
        worst = State.OPEN if State.OPEN in others.values() else max(others.values(), default=0)
        self.gauge.labels(route).set(int(worst))

    def _refresh(self, key: str, view: _View) -> None:
        view.refresh_at = time.monotonic() + self.settings.refresh_s
        task = asyncio.get_running_loop().create_task(self._look(key, view))
        self._refreshing.add(task)
        task.add_done_callback(self._refreshing.discard)

    async def _look(self, key: str, view: _View) -> None:
        until = await self.guard.run("circuit", self.store.circuit_state(key))
        if until is None or view.probing:
            return
        if until and until != view.open_until_ms:
            view.open_until_ms = until
            self._set(key, view.route, State.OPEN)
            self.log.warning(
                "circuit_open",
                route=view.route,
                operation=key.split(" ", 1)[1],
                reason="shared",
                open_ms=until - _now_ms(),
            )
        elif not until and view.open_until_ms and view.open_until_ms > _now_ms():
            view.open_until_ms = 0  # another replica's probe closed it
            self._set(key, view.route, State.CLOSED)
            self.log.info("circuit_closed", route=view.route, reason="shared")


def open_answer(envelope: Envelope, blocked: Blocked) -> Envelope:
    """The open circuit's envelope (``UPSTREAM_UNAVAILABLE``, built from own_errors.yaml) with
    the last real error's code, message and category, and the circuit's facts in the hint: an
    agent sees the error the operation keeps giving, and that mend is holding it back."""
    facts = (
        f"The proxy stopped sending {blocked.operation} to the API after "
        f"{blocked.failures} failures in a row; it tries again in {blocked.wait_ms} ms."
    )
    retry = "Wait retry_after_ms, then send the request again."
    update: dict[str, object] = {
        "hint": f"{facts} {retry}",
        "steps": (facts, retry),
        "related_codes": tuple(dict.fromkeys((*envelope.related_codes, envelope.code))),
    }
    last = blocked.last
    if last is not None and last.code != envelope.code:
        update |= {"code": last.code, "message": last.message, "category": last.category}
    return envelope.model_copy(update=update)
