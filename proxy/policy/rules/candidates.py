"""Which rules a response can meet: a status bucket's body regexes in one RE2 set, and the rules
arranged so a response walks only its candidates (issue 43: rules indexed by what they can match).

Per status, a rule set holds its rules, a prefiltered ``Bucket`` when they have enough body
regexes, and the key paths they require; a rule whose regex the set did not see match, or whose
required keys the body lacks (``can_match``), is skipped without running anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import re2

from proxy.config.re2compile import options
from proxy.policy.rules.rule import Rule

#: Below this many body regexes in one status bucket, trying them in turn is as cheap as a set.
PREFILTER_MIN = 8


class BodyPatterns:
    """The body regexes of a status bucket in one RE2 set, compiled at its first use.

    A rule whose body regex the set did not see match cannot match, so it is skipped without
    running anything: a thousand body rules for one status cost one pass over the body.

    A set costs about 1 MB of RE2 program and 15 ms to compile, and the shipped packs make 19
    distinct ones (18 MB and 0.3 s of every start, issue 43): each is compiled when the first
    response of its statuses needs it, so a sidecar pays for the statuses its upstream sends.
    One set of every body regex instead was smaller still, but its DFA is the product of
    twice the patterns: a body never seen before cost up to 300 k instructions more to scan.
    """

    __slots__ = ("_set", "patterns", "slots")

    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns = tuple(patterns)
        #: RE2 numbers a set's patterns in the order they are added
        self.slots = {pattern: slot for slot, pattern in enumerate(self.patterns)}
        self._set: Any = None

    @property
    def compiled(self) -> bool:
        return self._set is not None

    def hits(self, text: str) -> frozenset[int]:
        """The slots of the regexes that match somewhere in ``text``."""
        compiled = self._set if self._set is not None else self._compile()
        return frozenset(compiled.Match(text) or ())  # None, not [], when nothing matched

    def _compile(self) -> Any:
        opts = options()
        opts.max_mem = 64 << 20  # the set's DFA grows with the number of patterns
        compiled = re2.Set.SearchSet(opts)
        for pattern in self.patterns:
            compiled.Add(pattern)
        compiled.Compile()
        self._set = compiled
        return compiled


class BodySets:
    """The body regex sets of an engine's rule sets, one per distinct list of regexes: statuses
    of one class, the unit view and every route with the shipped packs alone share theirs."""

    __slots__ = ("_sets",)

    def __init__(self) -> None:
        self._sets: dict[tuple[str, ...], BodyPatterns] = {}

    def __len__(self) -> int:
        return len(self._sets)

    def of(self, rules: Sequence[Rule]) -> BodyPatterns:
        """The set of the body regexes of ``rules``, in order, each once."""
        patterns = tuple(dict.fromkeys(r.body_pattern for r in rules if r.body_pattern is not None))
        known = self._sets.get(patterns)
        if known is None:
            known = self._sets[patterns] = BodyPatterns(patterns)
        return known


@dataclass(frozen=True, slots=True)
class Bucket:
    """A status bucket with a body prefilter, arranged so a response only walks its candidates.

    The rules without a body regex always are; of the others, only those whose regex the set saw
    match. Walking all of them to skip the rest one by one cost every request a Python step per
    rule: a thousand body rules for one status made each request pay for a thousand.
    """

    prefilter: BodyPatterns
    always: tuple[tuple[int, Rule], ...]
    by_slot: dict[int, tuple[tuple[int, Rule], ...]]

    @classmethod
    def build(cls, rules: Sequence[Rule], sets: BodySets) -> Bucket:
        prefilter = sets.of(rules)
        always: list[tuple[int, Rule]] = []
        by_slot: dict[int, list[tuple[int, Rule]]] = {}
        for position, rule in enumerate(rules):
            if rule.body_pattern is None:
                always.append((position, rule))
            else:
                slot = prefilter.slots[rule.body_pattern]
                by_slot.setdefault(slot, []).append((position, rule))
        return cls(prefilter, tuple(always), {k: tuple(v) for k, v in by_slot.items()})

    def candidates(self, hits: frozenset[int]) -> list[Rule]:
        """The rules that can match a text the prefilter saw ``hits`` in, in rule order."""
        chosen = [*self.always]
        for slot in hits:
            chosen.extend(self.by_slot[slot])
        chosen.sort(key=_position)
        return [rule for _, rule in chosen]


def _position(entry: tuple[int, Rule]) -> int:
    return entry[0]


def can_match(rule: Rule, present: frozenset[str]) -> bool:
    """Whether the body has at least one key path of each set the rule requires."""
    return all(not present.isdisjoint(need) for need in rule.requires)


def arranged(
    index: dict[int, list[Rule]], shared: BodySets
) -> tuple[dict[int, tuple[Rule, ...]], dict[int, Bucket], dict[int, frozenset[str]]]:
    """Per status: its rules, its prefiltered bucket (when it has enough body regexes), and the
    key paths its rules require. Statuses with the same rules share one of each: the 4xx and
    5xx of the shipped packs are a few distinct lists, and a copy per status was 4 MB."""
    buckets: dict[int, tuple[Rule, ...]] = {}
    prefiltered: dict[int, Bucket] = {}
    required: dict[int, frozenset[str]] = {}
    seen: dict[tuple[int, ...], int] = {}  # the rules' identities -> the first status with them
    for status, rules in index.items():
        first = seen.setdefault(tuple(map(id, rules)), status)
        if first != status:
            buckets[status], required[status] = buckets[first], required[first]
            if first in prefiltered:
                prefiltered[status] = prefiltered[first]
            continue
        bucket = buckets[status] = tuple(rules)
        required[status] = frozenset(
            path for rule in bucket for need in rule.requires for path in need
        )
        if sum(rule.body_pattern is not None for rule in bucket) >= PREFILTER_MIN:
            prefiltered[status] = Bucket.build(bucket, shared)
    return buckets, prefiltered, required
