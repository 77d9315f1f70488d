"""What a rule set remembers of the responses it matched: a response seen before is matched once."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from proxy.policy.exchange import Exchange
from proxy.policy.rules.memo import Bounded, Probation
from proxy.policy.rules.rule import Match, Rule

#: Responses whose match a rule set remembers, the characters their keys may hold in all, and
#: the longest body remembered: an API that answers the same error again (an agent retrying a
#: request unchanged) is matched once, and the memory stays under a few MB.
_MATCHES_MAX = 256
_MATCH_CHARS_MAX = 2 << 20
_MATCH_TEXT_MAX = 32_768

#: Sentinel: no match remembered for a key (``None`` is a remembered "no rule matches").
UNKNOWN = object()

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
        #: by status: asked only while responses with it repeat (``proxy/policy/rules/memo.py``); a
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
        """The remembered ``Match`` (or ``None``), else ``UNKNOWN``."""
        entry = self.entries.get(key)
        return UNKNOWN if entry is None else entry[0]

    def remember(self, key: MatchKey, match: Match | None) -> None:
        self.put(key, match, len(key[7]) + len(key[8] or b"") + len(key[2]))


def memory_for(rules: Iterable[Rule]) -> MatchMemory | None:
    """A match memory for ``rules``, or ``None`` when one of them does not say what it reads."""
    headers: set[str] = set()
    asked: set[str] = set()
    for rule in rules:
        if rule.headers_read is None or rule.request_headers_read is None:
            return None
        headers |= rule.headers_read
        asked |= rule.request_headers_read
    return MatchMemory(tuple(sorted(headers)), tuple(sorted(asked)))
