"""Everything compiled from the rule files: one rule set per route, plus mend's own envelopes,
and the redactor each route's envelopes and log lines go through (the shipped detectors of
``rules/redaction/`` with the route's ``redaction:`` additions).

An ``Engine`` is immutable; reloading builds a new one and swaps it in whole (``RuleStore``), so a
request always sees one consistent rule set and a bad file never replaces a good one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from proxy.config.certificates import ClientTLS, TLSFileError, client_tls
from proxy.config.redaction import RedactionSettings
from proxy.config.settings import Settings
from proxy.config.yamlfile import RuleError, exhausted
from proxy.policy.openapi.spec import Spec
from proxy.policy.redaction import Redactor
from proxy.policy.redaction.detectors import LoadedDetector
from proxy.policy.redaction.sets import build_set, load_shipped
from proxy.policy.rules.candidates import BodySets
from proxy.policy.rules.rule import Rule
from proxy.policy.rules.rulefile import LoadedRule, load_rule_text, load_rules
from proxy.policy.rules.ruleset import RuleSet

_HERE = Path(__file__).resolve().parent
FALLBACKS = _HERE / "fallbacks.yaml"
OWN_ERRORS = _HERE / "own_errors.yaml"


def _compile(rule: LoadedRule) -> Rule:
    """``Rule.compile``; running out of stack or memory on it is that rule's ``file:line`` error."""
    try:
        return Rule.compile(rule)
    except (RecursionError, MemoryError) as exc:
        raise exhausted(rule.source, exc) from exc


def _builtin(path: Path) -> list[LoadedRule]:
    return load_rule_text(path.read_text(encoding="utf-8"), str(path), default_pack=path.stem)


def _redactors(settings: Settings, problems: list[str]) -> tuple[dict[str, Redactor], Redactor]:
    """The agent redactor of every route, and one with the top-level additions only (for what
    no route serves); routes with the same additions share one. Problems go to ``problems``."""
    built: dict[RedactionSettings, Redactor] = {}
    try:
        shipped: list[LoadedDetector] = load_shipped()
    except RuleError as exc:
        problems.extend(exc.problems)
        return {}, Redactor(neutral="")

    def redactor(additions: RedactionSettings) -> Redactor:
        if additions not in built:
            # neutral="": a value that is all internals becomes empty, so the envelope falls
            # back to its own default sentence (evaluate.agent_redactor)
            built[additions] = Redactor(
                build_set(shipped, additions, max_bytes=settings.max_file_bytes), neutral=""
            )
        return built[additions]

    try:
        default = redactor(settings.redaction)
        routes = {
            route.name: redactor(settings.redaction.merged(route.redaction))
            for route in settings.routes
        }
    except RuleError as exc:
        problems.extend(exc.problems)
        return {}, Redactor(neutral="")
    return routes, default


def _specs(settings: Settings, problems: list[str]) -> dict[str, Spec]:
    """Each route's OpenAPI document, loaded and compiled (once per file); problems go to
    ``problems``, so a bad document fails the whole load, as a bad rule file does."""
    loaded: dict[Path, Spec] = {}
    out: dict[str, Spec] = {}
    for route in settings.routes:
        if route.openapi is None:
            continue
        try:
            if route.openapi not in loaded:
                loaded[route.openapi] = Spec.load(route.openapi)
            if route.validate_requests:  # validators share a registry: built here, not on a request
                loaded[route.openapi].checker.prepare()
        except RuleError as exc:
            problems.extend(p for p in exc.problems if p not in problems)
            continue
        out[route.name] = loaded[route.openapi]
    return out


@dataclass(frozen=True, slots=True)
class Engine:
    routes: dict[str, RuleSet]
    own: dict[str, Rule]
    rules: tuple[Rule, ...]  # every distinct rule, in order of first appearance (for the catalog)
    #: each route's agent redactor (``redactor_for``)
    redactors: dict[str, Redactor] = field(default_factory=dict)
    #: the redactor of requests no route serves (refused before one is chosen)
    redactor: Redactor = field(default_factory=lambda: Redactor(neutral=""))
    #: each route's OpenAPI document, for the routes that have one (``proxy/policy/openapi/``)
    specs: dict[str, Spec] = field(default_factory=dict)

    @classmethod
    def load(cls, settings: Settings) -> Engine:
        """Load and compile every rule file the settings name; ``RuleError`` lists all problems."""
        shared = load_rules(
            settings.rule_paths(), settings.disabled_packs, max_bytes=settings.max_file_bytes
        )
        fallbacks = _builtin(FALLBACKS)
        compiled: dict[str, Rule] = {}

        def compile_all(loaded: list[LoadedRule]) -> list[Rule]:
            return [compiled.setdefault(r.spec.id, _compile(r)) for r in loaded]

        shared_rules = compile_all(shared)
        tail = compile_all(fallbacks)
        shared_ids = {r.spec.id: r.source for r in [*shared, *fallbacks]}
        routes: dict[str, RuleSet] = {}
        sets = BodySets()  # the routes share the body regex sets of the same rules
        problems: list[str] = []
        for route in settings.routes:
            try:
                own_rules = load_rules(route.rules, max_bytes=settings.max_file_bytes)
            except RuleError as exc:
                problems.extend(exc.problems)
                continue
            for rule in own_rules:
                if rule.spec.id in shared_ids:
                    problems.append(
                        f"{rule.source}: duplicate rule id {rule.spec.id!r} "
                        f"(first at {shared_ids[rule.spec.id]})"
                    )
            routes[route.name] = RuleSet.build(
                [*compile_all(own_rules), *shared_rules, *tail],
                route.success_rules,
                sets=sets,
            )
        redactors, default = _redactors(settings, problems)
        specs = _specs(settings, problems)
        if problems:
            raise RuleError(problems)
        own = {r.spec.id: Rule.compile(r) for r in _builtin(OWN_ERRORS)}
        every = tuple(compiled.values()) + tuple(own.values())
        return cls(routes, own, every, redactors, default, specs)

    def redactor_for(self, route: str | None) -> Redactor:
        """The redactor of the route named ``route`` (the top-level one for any other name)."""
        return self.redactors.get(route, self.redactor) if route is not None else self.redactor

    @property
    def rule_count(self) -> int:
        return len(self.rules)


@dataclass(frozen=True, slots=True)
class Loaded:
    """One whole configuration: the settings, the engine compiled from them and each route's
    upstream TLS context (its files read). Built whole and swapped whole."""

    settings: Settings
    engine: Engine
    #: by route name, each route with a ``tls:`` block
    tls: dict[str, ClientTLS] = field(default_factory=dict)

    @classmethod
    def load(cls, settings: Settings, where: str = "") -> Loaded:
        """Compile ``settings``; ``RuleError`` names every rule problem, or a TLS file that
        cannot be used (as ``where: routes[name].tls.ca_file FILE: reason``)."""
        engine = Engine.load(settings)
        try:
            tls = client_tls(settings.routes)
        except TLSFileError as exc:
            raise RuleError([f"{where}{exc}"]) from exc
        return cls(settings, engine, tls)


class RuleStore:
    """Holds the configuration in force; ``reload`` swaps in a new one only if it loads cleanly.

    With a ``source`` (the ``--config`` file and the flags over it, ``ConfigSource.load``) a
    reload reads the settings again too, so routes, upstreams, timeouts, limits and TLS change
    with the rules, all at once; without one it recompiles the same settings' rule files.
    """

    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        *,
        on_reload: list[Callable[[bool, int], None]] | None = None,
        source: Callable[[], Settings] | None = None,
        tls: dict[str, ClientTLS] | None = None,
    ) -> None:
        self.loaded = Loaded(settings, engine, client_tls(settings.routes) if tls is None else tls)
        #: called with (succeeded, rules in force) after every attempt, in order
        self.on_reload: list[Callable[[bool, int], None]] = list(on_reload or ())
        self.source = source
        self.last_error: str | None = None

    @property
    def settings(self) -> Settings:
        return self.loaded.settings

    @property
    def engine(self) -> Engine:
        return self.loaded.engine

    @engine.setter
    def engine(self, engine: Engine) -> None:
        self.loaded = replace(self.loaded, engine=engine)

    def reload(self) -> Engine:
        """The new engine, or ``RuleError`` and the old configuration stays; every attempt is
        notified.

        Anything else loading raises is a bug, but still a failed reload: it is counted as one
        before it propagates.
        """
        try:
            settings = self.source() if self.source is not None else self.settings
            loaded = Loaded.load(settings)
        except Exception as exc:
            self.last_error = str(exc) if isinstance(exc, RuleError) else repr(exc)
            self._notify(False, self.engine.rule_count)
            raise
        self.loaded = loaded  # one assignment: a request sees the old whole or the new whole
        self.last_error = None
        self._notify(True, loaded.engine.rule_count)
        return loaded.engine

    def _notify(self, ok: bool, rules: int) -> None:
        for listener in self.on_reload:
            listener(ok, rules)
