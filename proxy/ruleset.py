"""An ordered rule set: first match wins, built-in fallbacks close the list.

Rules are indexed by the statuses they can match, so a request only walks the rules that could
apply to its status; a rule set that grows by rules for other statuses costs that request nothing.
Rules that match 2xx only take part on routes whose ``success_rules`` name them (CONTRACT §3).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.build import CompiledEnvelope
from proxy.exchange import Exchange
from proxy.matchers import Found, Predicate, compile_when, statuses
from proxy.rulefile import Docs, LoadedRule, compile_jmespath

ERROR_STATUSES = frozenset(range(400, 600))
SUCCESS_STATUSES = frozenset(range(200, 300))
FALLBACK_PREFIX = "fallback."


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    pack: str
    source: str
    description: str | None
    statuses: frozenset[int]
    predicates: tuple[Predicate, ...]
    queries: tuple[tuple[str, Any], ...]
    envelope: CompiledEnvelope
    docs: Docs | None

    @classmethod
    def compile(cls, loaded: LoadedRule) -> Rule:
        spec = loaded.spec
        codes = statuses(spec.when)
        return cls(
            id=spec.id,
            pack=loaded.pack,
            source=loaded.source,
            description=spec.description,
            # a rule that names no status is about errors: 2xx must always be asked for by name
            statuses=ERROR_STATUSES if codes is None else codes,
            predicates=compile_when(spec.when),
            queries=tuple((name, compile_jmespath(q)) for name, q in spec.vars.items()),
            envelope=CompiledEnvelope.compile(spec.envelope),
            docs=spec.docs,
        )

    @property
    def is_fallback(self) -> bool:
        return self.id.startswith(FALLBACK_PREFIX)

    def test(self, exchange: Exchange) -> tuple[bool, Found, Predicate | None]:
        """Whether the rule matches, the variables it found, and the first predicate that failed."""
        found: Found = {}
        for predicate in self.predicates:
            if not predicate(exchange, found):
                return False, found, predicate
        if exchange.is_json:
            for name, query in self.queries:
                found.setdefault(name, query.search(exchange.json))
        return True, found, None


@dataclass(frozen=True, slots=True)
class Match:
    rule: Rule
    found: Found


@dataclass(frozen=True, slots=True)
class Verdict:
    """One line of ``mend explain``: what a rule made of the exchange."""

    rule: Rule
    matched: bool
    reason: str
    found: Found = field(default_factory=dict)


def _wanted_on_success(rule_id: str, globs: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(rule_id, g) for g in globs)


@dataclass(frozen=True, slots=True)
class RuleSet:
    rules: tuple[Rule, ...]
    index: dict[int, tuple[Rule, ...]]

    @classmethod
    def build(cls, rules: Iterable[Rule], success_rules: Sequence[str] = ()) -> RuleSet:
        ordered = tuple(rules)
        index: dict[int, list[Rule]] = {}
        for rule in ordered:
            wanted = rule.statuses
            if not _wanted_on_success(rule.id, success_rules):
                wanted = wanted - SUCCESS_STATUSES
            for status in wanted:
                index.setdefault(status, []).append(rule)
        return cls(ordered, {status: tuple(rs) for status, rs in index.items()})

    def inspects(self, status: int) -> bool:
        """Whether a response with this status must be read and matched at all."""
        return status in self.index

    def match(self, exchange: Exchange) -> Match | None:
        for rule in self.index.get(exchange.status or 0, ()):
            matched, found, _ = rule.test(exchange)
            if matched:
                return Match(rule, found)
        return None

    def explain(self, exchange: Exchange) -> list[Verdict]:
        """Every rule in order up to and including the first match, with why it did (not) match."""
        candidates = self.index.get(exchange.status or 0, ())
        verdicts: list[Verdict] = []
        for rule in self.rules:
            if rule not in candidates:
                reason = f"status {exchange.status} is not one it matches"
                if exchange.status in rule.statuses:
                    reason = "matches 2xx only on routes whose success_rules name it"
                verdicts.append(Verdict(rule, False, reason))
                continue
            matched, found, failed = rule.test(exchange)
            if matched:
                verdicts.append(Verdict(rule, True, "every condition held", found))
                break
            verdicts.append(
                Verdict(rule, False, f"failed: {failed.description if failed else '?'}")
            )
        return verdicts
