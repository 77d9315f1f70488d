"""An ordered rule set: first match wins, built-in fallbacks close the list.

Rules are indexed by the statuses they can match, so a request only walks the rules that could
apply to its status; a rule set that grows by rules for other statuses costs that request nothing.
Rules that match 2xx only take part on routes whose ``success_rules`` name them (docs/contract.md
§3). Each rule is a ``rule.Rule``; which of a status's rules a response can meet is
``candidates.py``'s (its body regexes in one RE2 set, the key paths its rules require), and what
was matched before is ``match_memory.py``'s.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from proxy.policy.exchange import Exchange
from proxy.policy.rules.candidates import BodySets, Bucket, arranged, can_match
from proxy.policy.rules.match_memory import UNKNOWN, MatchMemory, memory_for
from proxy.policy.rules.query import present_paths
from proxy.policy.rules.rule import SUCCESS_STATUSES, Match, Rule, Verdict

#: Rules that match errors a protocol reports inside a 2xx (a JSON-RPC ``error``, a GraphQL
#: ``errors`` entry, an MCP tool result with ``isError``): they match such units on every route,
#: with no ``success_rules``. So does any rule that names ``protocol``, ``tool`` or ``rpc_method``.
PROTOCOL_RULES = ("jsonrpc.*", "mcp.*", "graphql.*", "fallback.*")

#: Distinct response shapes remembered per rule set before the memory starts over.
_SHAPES_MAX = 1024

#: (status, prefilter hits, the key paths present that a rule for the status requires): what
#: decides which rules a response can match. Only paths the rules name: a body's own keys
#: (field names an agent chose, ids) would make every response a new shape, and a large one.
Shape = tuple[int, frozenset[int], frozenset[str]]


def _wanted_on_success(rule_id: str, globs: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(rule_id, g) for g in globs)


@dataclass(frozen=True, slots=True)
class RuleSet:
    rules: tuple[Rule, ...]
    index: dict[int, tuple[Rule, ...]]
    prefiltered: dict[int, Bucket] = field(default_factory=dict)
    #: the candidate rules per response shape: an API answers with a handful of error shapes,
    #: so walking the status bucket to drop rules that cannot match is done once per shape
    _shapes: dict[Shape, tuple[Rule, ...]] = field(default_factory=dict, compare=False)
    #: per status, every key path some rule indexed under it requires
    _required: dict[int, frozenset[str]] = field(default_factory=dict, compare=False)
    #: the same rules for the error units of a protocol (proxy/policy/protocols): 2xx included for
    #: the
    #: protocol packs and the rules that name a protocol (``match_unit``)
    units: RuleSet | None = field(default=None, compare=False)
    #: matches of responses seen before (``None``: not remembered)
    memory: MatchMemory | None = field(default=None, compare=False)

    @classmethod
    def build(
        cls,
        rules: Iterable[Rule],
        success_rules: Sequence[str] = (),
        protocol_rules: Sequence[str] | None = PROTOCOL_RULES,
        sets: BodySets | None = None,
    ) -> RuleSet:
        """The rule set; ``success_rules`` are globs of rule ids to run on 2xx responses, and
        ``protocol_rules`` those to run on 2xx protocol units (``None``: no unit view).
        ``sets``: the body regex sets it shares with other rule sets (an engine's routes)."""
        ordered = tuple(rules)
        shared = BodySets() if sets is None else sets
        units = None
        if protocol_rules is not None:
            unit_globs = (*success_rules, *protocol_rules)
            units = cls._build(
                ordered, lambda r: r.speaks or _wanted_on_success(r.id, unit_globs), shared, None
            )
        return cls._build(ordered, lambda r: _wanted_on_success(r.id, success_rules), shared, units)

    @classmethod
    def _build(
        cls,
        ordered: tuple[Rule, ...],
        on_success: Callable[[Rule], bool],
        shared: BodySets,
        units: RuleSet | None,
    ) -> RuleSet:
        index: dict[int, list[Rule]] = {}
        for rule in ordered:
            wanted = rule.statuses
            if not on_success(rule):
                wanted = wanted - SUCCESS_STATUSES
            for status in wanted:
                index.setdefault(status, []).append(rule)
        buckets, prefiltered, required = arranged(index, shared)
        return cls(
            ordered,
            buckets,
            prefiltered,
            _required=required,
            units=units,
            memory=memory_for(ordered),
        )

    def match_unit(self, exchange: Exchange) -> Match | None:
        """``match`` for one error a protocol found in a response (``proxy/policy/protocols``)."""
        return (self.units or self).match(exchange)

    def inspects(self, status: int) -> bool:
        """Whether a response with this status must be read and matched at all."""
        return status in self.index

    def candidates(self, exchange: Exchange) -> tuple[Rule, ...]:
        """The rules that can match ``exchange``, in rule order; the others are never tried."""
        status = exchange.status or 0
        bucket = self.prefiltered.get(status)
        hits = frozenset[int]() if bucket is None else bucket.prefilter.hits(exchange.text)
        required = self._required.get(status)
        present = present_paths(exchange.json) & required if required else frozenset[str]()
        shape = (status, hits, present)
        known = self._shapes.get(shape)
        if known is not None:
            return known
        bucketed = self.index.get(status, ()) if bucket is None else bucket.candidates(hits)
        known = tuple(rule for rule in bucketed if can_match(rule, present))
        if len(self._shapes) >= _SHAPES_MAX:  # bodies keyed by ids, say: start over, stay small
            self._shapes.clear()
        self._shapes[shape] = known
        return known

    def match(self, exchange: Exchange) -> Match | None:
        """The first rule that matches ``exchange``, with what it found; a response seen before
        is answered from ``memory`` (its found values copied)."""
        memory = self.memory
        if memory is None:
            return self.walk(exchange)
        probation = memory.probation(exchange.status or 0)
        key = memory.key(exchange) if probation.worth() else None
        if key is None:
            return self.walk(exchange)
        known = memory.get(key)
        if known is UNKNOWN:
            probation.miss()
            known = self.walk(exchange)
            memory.remember(key, known)
        else:
            probation.hit()
        return None if known is None else Match(known.rule, dict(known.found))

    def walk(self, exchange: Exchange) -> Match | None:
        """The first rule that matches ``exchange``, every candidate tried in turn."""
        for rule in self.candidates(exchange):
            matched, found, _ = rule.test(exchange)
            if matched:
                return Match(rule, found)
        return None

    def explain_unit(self, exchange: Exchange) -> list[Verdict]:
        """``explain`` for one error a protocol found in a response."""
        return (self.units or self).explain(exchange)

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
