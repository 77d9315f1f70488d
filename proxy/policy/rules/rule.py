"""One compiled rule: its statuses, its conditions as predicates, its variables' queries, and the
envelope it builds; a match, and one line of ``mend explain``'s verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.policy.exchange import Exchange
from proxy.policy.rules.compiled_envelope import CompiledEnvelope
from proxy.policy.rules.matchers import (
    Found,
    Predicate,
    compile_when,
    header_names,
    required_keys,
    speaks_protocol,
    statuses,
)
from proxy.policy.rules.rulefile import LoadedRule
from proxy.policy.rules.rulespec import Docs, compile_jmespath

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
