"""What the admin page shows, as data (issue 40): routes, rules and their hits, reloads, recent
failures, the unexplained shapes with their proposals, and the playground's explanation.

Every view is plain JSON, served on the admin API as it is and rendered by the page
(``proxy/runtime/admin_page.py``), so a script and the page never disagree. One process and the
``--workers`` supervisor differ only in their ``Sources``: the supervisor sees no request and
holds no engine, so its books are the workers' files merged and its engine is loaded as the
workers load theirs (on first use, again after a reload).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from proxy.config.settings import Settings
from proxy.config.shown import shown_url
from proxy.observation import recent, shapes
from proxy.observation.recent import Failure, RecentLimits
from proxy.observation.shapes import Seen, ShapeLimits
from proxy.policy import explanation
from proxy.policy.crosscall.circuit import State
from proxy.policy.rules.ruleengine import FALLBACKS, Engine, RuleStore
from proxy.policy.rules.rulefile import load_rule_text
from proxy.runtime.books import Books, read_books
from proxy.runtime.health import HealthChecks, RouteHealth
from proxy.runtime.proposals import Proposal, propose
from proxy.runtime.reloads import ReloadLog

#: the largest body the playground explains
MAX_PLAYGROUND_BODY = 256 * 1024


def fallback_codes() -> dict[str, tuple[str, str]]:
    """Each built-in fallback's code and category, by rule id (read from the file the engine
    reads them from: the supervisor of ``--workers`` holds no engine)."""
    text = FALLBACKS.read_text(encoding="utf-8")
    loaded = load_rule_text(text, str(FALLBACKS), default_pack=FALLBACKS.stem)
    return {r.spec.id: (r.spec.envelope.code, r.spec.envelope.category.value) for r in loaded}


def merged(found: Iterable[Mapping[str, Any]]) -> tuple[list[Seen], list[Failure]]:
    """Several books as one: shapes counted together, failures newest first."""
    books = list(found)
    kept = shapes.merge((b.get("shapes", ()) for b in books), ShapeLimits())
    last = recent.merge((b.get("recent", ()) for b in books), RecentLimits())
    return kept, last


def own_books(books: Books) -> Callable[[], tuple[list[Seen], list[Failure]]]:
    """This process's books, with the other replicas' when they share a store."""

    def read() -> tuple[list[Seen], list[Failure]]:
        others = books.remote()
        if not others:
            return books.shapes.entries(), books.recent.entries()
        return merged([books.own(), *others.values()])

    return read


def workers_books(directory: Path) -> Callable[[], tuple[list[Seen], list[Failure]]]:
    """The books every worker wrote into ``directory``, and the other replicas' they read from
    the store (the workers' own names left out: each is among the others' remote books)."""

    def read() -> tuple[list[Seen], list[Failure]]:
        local = list(read_books(directory))
        names = {b.get("replica") for b in local}
        remote: dict[str, Any] = {}
        for book in local:
            for name, theirs in (book.get("remote") or {}).items():
                if name not in names and isinstance(theirs, dict):
                    remote[name] = theirs
        return merged([*local, *remote.values()])

    return read


@dataclass(frozen=True, slots=True)
class Sources:
    """Where the cockpit reads what it shows."""

    settings: Callable[[], Settings]
    #: the rules in force (the supervisor: loaded as the workers load them; ``RuleError``)
    engine: Callable[[], Engine]
    registry: CollectorRegistry
    health: Callable[[], Mapping[str, RouteHealth]]
    books: Callable[[], tuple[list[Seen], list[Failure]]]
    reloads: ReloadLog


class PlaygroundError(ValueError):
    """The playground's input does not make a response; the message says which field."""


@dataclass(frozen=True, slots=True)
class Playground:
    """A response pasted into the playground, as ``mend explain``'s flags give it."""

    route: str | None
    status: int
    headers: tuple[str, ...]
    body: bytes
    method: str = "GET"
    path: str = "/"

    @classmethod
    def of(cls, form: Mapping[str, Any]) -> Playground:
        """From a form or a JSON object; ``PlaygroundError`` names what is wrong."""
        try:
            status = int(form.get("status", ""))
        except ValueError:
            raise PlaygroundError("status: give a number from 100 to 599") from None
        if not 100 <= status <= 599:
            raise PlaygroundError("status: give a number from 100 to 599")
        body = str(form.get("body", "")).encode()
        if len(body) > MAX_PLAYGROUND_BODY:
            raise PlaygroundError(f"body: at most {MAX_PLAYGROUND_BODY} bytes")
        lines = _header_lines(form.get("headers", ""))
        headers = tuple(line for line in (h.strip() for h in lines) if line)
        path = str(form.get("path") or "/")
        method = str(form.get("method") or "GET").upper()
        return cls(form.get("route") or None, status, headers, body, method, path)


def _header_lines(given: object) -> list[str]:
    """Headers as a form's text (one per line), a JSON list of lines or a JSON object."""
    if isinstance(given, dict):
        return [f"{k}: {v}" for k, v in given.items()]
    if isinstance(given, list):
        return [str(line) for line in given]
    return str(given).splitlines()


class Cockpit:
    """The admin page's views, each a JSON-ready value."""

    def __init__(self, sources: Sources) -> None:
        self.sources = sources
        self.codes = fallback_codes()

    def overview(self) -> dict[str, Any]:
        """Everything the page shows but the playground."""
        return {
            "routes": self.routes(),
            "rules": self.rules(),
            "reloads": self.reloads(),
            "failures": self.failures(),
            "shapes": self.unexplained(),
        }

    def routes(self) -> list[dict[str, Any]]:
        """Each route with its upstream (no credentials), readiness and circuit."""
        health = self.sources.health()
        circuits = _circuits(self.sources.registry)
        listed = []
        for route in self.sources.settings().routes:
            checked = health.get(route.name)
            listed.append(
                {
                    "name": route.name,
                    "prefix": route.prefix,
                    "upstream": shown_url(route.upstream),
                    "protocol": route.protocol.value,
                    "ready": None if checked is None else checked.healthy,
                    "reason": "no health_check" if checked is None else checked.reason,
                    "circuit": circuits.get(route.name, State.CLOSED).name.lower(),
                }
            )
        return listed

    def rules(self) -> list[dict[str, Any]]:
        """Every rule in force, in order, with its ``file:line`` and its hits since start."""
        hits = _hits(self.sources.registry)
        return [
            {
                "id": rule.id,
                "pack": rule.pack,
                "source": rule.source,
                "code": rule.envelope.spec.code,
                "category": rule.envelope.spec.category.value,
                "description": rule.description,
                "hits": hits.get(rule.id, 0),
            }
            for rule in self.sources.engine().rules
        ]

    def reloads(self) -> list[dict[str, Any]]:
        return [r.as_dict() for r in self.sources.reloads.entries()]

    def failures(self) -> list[dict[str, Any]]:
        return [f.as_dict() for f in self.sources.books()[1]]

    def unexplained(self) -> list[dict[str, Any]]:
        """Each unexplained shape, with the rule proposed for it."""
        return [
            {**seen.as_dict(), "proposal": self.propose(seen).as_dict()}
            for seen in self.sources.books()[0]
        ]

    def shapes(self) -> list[Seen]:
        return self.sources.books()[0]

    def propose(self, seen: Seen) -> Proposal:
        return propose(seen, self.codes)

    def proposals(self) -> list[Proposal]:
        return [self.propose(seen) for seen in self.shapes()]

    def explain(self, given: Playground) -> dict[str, Any]:
        """What ``mend explain --json`` prints for the same response: the verdicts and the
        envelope. ``PlaygroundError`` for a route or header that does not read."""
        settings, engine = self.sources.settings(), self.sources.engine()
        try:
            route = explanation.route_for(settings, given.route, given.path)
            exchange = explanation.exchange_from(
                status=given.status,
                body=given.body,
                headers=given.headers,
                method=given.method,
                path=given.path,
            )
        except ValueError as exc:
            raise PlaygroundError(str(exc)) from exc
        options = explanation.build_options(settings)
        found = explanation.explain(engine, route.name, exchange, options)
        return explanation.as_json(found)


def process_cockpit(
    store: RuleStore,
    registry: CollectorRegistry,
    health: HealthChecks | None,
    books: Books,
) -> Cockpit:
    """One process's cockpit: its own store, health checks and books; its reloads heard."""
    reloads = ReloadLog(store.engine.rule_count)
    store.on_reload.append(reloads.listener(store))
    sources = Sources(
        settings=lambda: store.settings,
        engine=lambda: store.engine,
        registry=registry,
        health=lambda: {} if health is None else health.state,
        books=own_books(books),
        reloads=reloads,
    )
    return Cockpit(sources)


def _samples(registry: CollectorRegistry, name: str) -> Iterator[tuple[dict[str, str], float]]:
    for metric in registry.collect():
        for sample in metric.samples:
            if sample.name == name:
                yield sample.labels, sample.value


def _hits(registry: CollectorRegistry) -> dict[str, int]:
    """Errors answered per rule since start (``mend_errors_total``, every worker's)."""
    hits: defaultdict[str, int] = defaultdict(int)
    for labels, value in _samples(registry, "mend_errors_total"):
        hits[labels.get("rule", "")] += int(value)
    return hits


def _circuits(registry: CollectorRegistry) -> dict[str, State]:
    """Each route's worst circuit (``mend_circuit_state``; the worst worker's)."""
    worst: dict[str, State] = {}
    for labels, value in _samples(registry, "mend_circuit_state"):
        route = labels.get("route", "")
        try:
            state = State(int(value))
        except ValueError:
            continue
        if _rank(state) > _rank(worst.get(route, State.CLOSED)):
            worst[route] = state
    return worst


def _rank(state: State) -> int:
    """Open is worse than half-open (probing), which is worse than closed."""
    return {State.CLOSED: 0, State.HALF_OPEN: 1, State.OPEN: 2}[state]
