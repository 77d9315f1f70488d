"""An ordered rule set: first match wins, built-in fallbacks close the list.

Rules are indexed by the statuses they can match, so a request only walks the rules that could
apply to its status; a rule set that grows by rules for other statuses costs that request nothing.
Rules that match 2xx only take part on routes whose ``success_rules`` name them (docs/contract.md
§3).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import re2

from proxy.config.re2compile import options
from proxy.policy.compiled_envelope import CompiledEnvelope
from proxy.policy.exchange import Exchange
from proxy.policy.matchers import (
    Found,
    Predicate,
    compile_when,
    header_names,
    required_keys,
    speaks_protocol,
    statuses,
)
from proxy.policy.memo import Bounded, Probation
from proxy.policy.query import present_paths
from proxy.policy.rulefile import Docs, LoadedRule, compile_jmespath

ERROR_STATUSES = frozenset(range(400, 600))
SUCCESS_STATUSES = frozenset(range(200, 300))
FALLBACK_PREFIX = "fallback."
#: Rules that match errors a protocol reports inside a 2xx (a JSON-RPC ``error``, a GraphQL
#: ``errors`` entry, an MCP tool result with ``isError``): they match such units on every route,
#: with no ``success_rules``. So does any rule that names ``protocol``, ``tool`` or ``rpc_method``.
PROTOCOL_RULES = ("jsonrpc.*", "mcp.*", "graphql.*", "fallback.*")


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    pack: str
    source: str
    description: str | None
    statuses: frozenset[int]
    predicates: tuple[Predicate, ...]
    queries: tuple[tuple[str, str, Any], ...]
    envelope: CompiledEnvelope
    docs: Docs | None
    body_pattern: str | None  # the top-level `body` regex, for the status bucket's prefilter
    #: JSON keys the body must have (one of each set), else the rule cannot match
    requires: tuple[frozenset[str], ...] = ()
    #: names ``protocol``, ``tool`` or ``rpc_method``: about errors a protocol reports
    speaks: bool = False
    #: the response and request headers its conditions read (lower case); ``None``: not known,
    #: so a rule set holding it never remembers a match (``MatchMemory``)
    headers_read: frozenset[str] | None = None
    request_headers_read: frozenset[str] | None = None

    @classmethod
    def compile(cls, loaded: LoadedRule) -> Rule:
        spec = loaded.spec
        codes = statuses(spec.when)
        speaks = speaks_protocol(spec.when)
        # a rule that names no status is about errors: 2xx must always be asked for by name,
        # unless it is about a protocol, whose errors come in a 200 as often as not
        default = ERROR_STATUSES | SUCCESS_STATUSES if speaks else ERROR_STATUSES
        return cls(
            id=spec.id,
            pack=loaded.pack,
            source=loaded.source,
            description=spec.description,
            statuses=default if codes is None else codes,
            predicates=compile_when(spec.when),
            queries=tuple((name, q, compile_jmespath(q)) for name, q in spec.vars.items()),
            envelope=CompiledEnvelope.compile(spec.envelope, spec.id),
            docs=spec.docs,
            body_pattern=spec.when.body,
            requires=required_keys(spec.when),
            speaks=speaks,
            headers_read=header_names(spec.when, "headers"),
            request_headers_read=header_names(spec.when, "request_headers"),
        )

    @property
    def is_fallback(self) -> bool:
        return self.id.startswith(FALLBACK_PREFIX)

    def test(self, exchange: Exchange) -> tuple[bool, Found, Predicate | None]:
        """Whether the rule matches, the variables it found, and the first predicate that failed."""
        found: Found = {}
        for predicate in self.predicates:
            if not predicate.test(exchange, found):
                return False, found, predicate
        if exchange.is_json:
            for name, expression, query in self.queries:
                found.setdefault(name, exchange.query(expression, query))
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


#: Below this many body regexes in one status bucket, trying them in turn is as cheap as a set.
_PREFILTER_MIN = 8


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
class _Bucket:
    """A status bucket with a body prefilter, arranged so a response only walks its candidates.

    The rules without a body regex always are; of the others, only those whose regex the set saw
    match. Walking all of them to skip the rest one by one cost every request a Python step per
    rule: a thousand body rules for one status made each request pay for a thousand.
    """

    prefilter: BodyPatterns
    always: tuple[tuple[int, Rule], ...]
    by_slot: dict[int, tuple[tuple[int, Rule], ...]]

    @classmethod
    def build(cls, rules: Sequence[Rule], sets: BodySets) -> _Bucket:
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


def _can_match(rule: Rule, present: frozenset[str]) -> bool:
    """Whether the body has at least one key path of each set the rule requires."""
    return all(not present.isdisjoint(need) for need in rule.requires)


#: Distinct response shapes remembered per rule set before the memory starts over.
_SHAPES_MAX = 1024

#: (status, prefilter hits, the key paths present that a rule for the status requires): what
#: decides which rules a response can match. Only paths the rules name: a body's own keys
#: (field names an agent chose, ids) would make every response a new shape, and a large one.
Shape = tuple[int, frozenset[int], frozenset[str]]


#: Responses whose match a rule set remembers, the characters their keys may hold in all, and
#: the longest body remembered: an API that answers the same error again (an agent retrying a
#: request unchanged) is matched once, and the memory stays under a few MB.
_MATCHES_MAX = 256
_MATCH_CHARS_MAX = 2 << 20
_MATCH_TEXT_MAX = 32_768

#: Sentinel: no match remembered for a key (``None`` is a remembered "no rule matches").
_UNKNOWN = object()

MatchKey = tuple[Any, ...]


class MatchMemory(Bounded[tuple[Any, ...], "Match | None"]):
    """The match of a response seen before, by everything a rule set's conditions can read of
    it: status, method, path, content type, protocol, tool, JSON-RPC method, body text, JSON
    document (as ``orjson`` writes it), and the values of the headers its rules name.

    Matching is a pure function of those, so a remembered match is the match; a response with
    a longer body, or a document ``orjson`` cannot write, is matched and not remembered.
    Bounded by entries and by characters, the oldest dropped first.
    """

    __slots__ = ("headers", "probations", "request_headers")

    def __init__(self, headers: tuple[str, ...], request_headers: tuple[str, ...]) -> None:
        super().__init__(_MATCHES_MAX, _MATCH_CHARS_MAX)
        self.headers = headers
        self.request_headers = request_headers
        #: by status: asked only while responses with it repeat (``proxy/policy/memo.py``); a
        #: route whose 500s never repeat (a timestamp in each) still remembers its 422s
        self.probations: dict[int, Probation] = {}

    def probation(self, status: int) -> Probation:
        probation = self.probations.get(status)
        if probation is None:  # at most one per status code an upstream can send (100-999)
            probation = self.probations[status] = Probation()
        return probation

    def key(self, exchange: Exchange) -> MatchKey | None:
        text = exchange.text
        if len(text) > _MATCH_TEXT_MAX:
            return None
        document: bytes | None = None
        if exchange.is_json:
            document = exchange.written()
            if document is None or len(document) > _MATCH_TEXT_MAX:
                return None
        return (
            exchange.status,
            exchange.method,
            exchange.path,
            exchange.content_type,
            exchange.protocol,
            exchange.rpc_method,
            exchange.tool,
            text,
            document,
            tuple(map(exchange.headers.get, self.headers)),
            tuple(map(exchange.request_headers.get, self.request_headers)),
        )

    def get(self, key: MatchKey) -> Any:
        """The remembered ``Match`` (or ``None``), else ``_UNKNOWN``."""
        entry = self.entries.get(key)
        return _UNKNOWN if entry is None else entry[0]

    def remember(self, key: MatchKey, match: Match | None) -> None:
        self.put(key, match, len(key[7]) + len(key[8] or b"") + len(key[2]))


def _memory(rules: Iterable[Rule]) -> MatchMemory | None:
    """A match memory for ``rules``, or ``None`` when one of them does not say what it reads."""
    headers: set[str] = set()
    asked: set[str] = set()
    for rule in rules:
        if rule.headers_read is None or rule.request_headers_read is None:
            return None
        headers |= rule.headers_read
        asked |= rule.request_headers_read
    return MatchMemory(tuple(sorted(headers)), tuple(sorted(asked)))


def _arranged(
    index: dict[int, list[Rule]], shared: BodySets
) -> tuple[dict[int, tuple[Rule, ...]], dict[int, _Bucket], dict[int, frozenset[str]]]:
    """Per status: its rules, its prefiltered bucket (when it has enough body regexes), and the
    key paths its rules require. Statuses with the same rules share one of each: the 4xx and
    5xx of the shipped packs are a few distinct lists, and a copy per status was 4 MB."""
    buckets: dict[int, tuple[Rule, ...]] = {}
    prefiltered: dict[int, _Bucket] = {}
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
        if sum(rule.body_pattern is not None for rule in bucket) >= _PREFILTER_MIN:
            prefiltered[status] = _Bucket.build(bucket, shared)
    return buckets, prefiltered, required


def _wanted_on_success(rule_id: str, globs: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(rule_id, g) for g in globs)


@dataclass(frozen=True, slots=True)
class RuleSet:
    rules: tuple[Rule, ...]
    index: dict[int, tuple[Rule, ...]]
    prefiltered: dict[int, _Bucket] = field(default_factory=dict)
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
        buckets, prefiltered, required = _arranged(index, shared)
        return cls(
            ordered,
            buckets,
            prefiltered,
            _required=required,
            units=units,
            memory=_memory(ordered),
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
        known = tuple(rule for rule in bucketed if _can_match(rule, present))
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
        if known is _UNKNOWN:
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
