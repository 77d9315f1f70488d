"""``MatchMemory``: a response seen before is matched from memory, exactly as walking the rules.

Every pack case and every corpus response is matched twice (the second answer from memory) and
compared with ``RuleSet.walk``, which tries every candidate rule, and the envelope built from the
remembered match with the one built from the walk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from proxy.policy.envelope.build import BuildOptions
from proxy.policy.evaluate import agent_redactor, recorded_exchange, rewrite
from proxy.policy.exchange import Exchange
from proxy.policy.rules import match_memory
from proxy.policy.rules.rule import Match, Rule
from proxy.policy.rules.ruleset import RuleSet
from proxy.tools.ruletest.engines import Engines
from tests.policy.memory_cases import Replays, corpus_entries, pack_cases

REPLAYS = Replays()


def _fresh() -> RuleSet:
    """The shipped packs' rule set for the default route, with an empty memory."""
    return Engines().get().routes["default"]


def _same(remembered: Match | None, walked: Match | None) -> None:
    if walked is None:
        assert remembered is None
        return
    assert remembered is not None
    assert remembered.rule is walked.rule
    assert remembered.found == walked.found


def _check(ruleset: RuleSet, make: Any) -> None:
    """``make()`` matched three times (walked, remembered, from memory) gives one answer, and the
    envelope built from memory is the one built from the walk."""
    walked = ruleset.walk(make())
    first = ruleset.match(make())
    again = ruleset.match(make())
    _same(first, walked)
    _same(again, walked)
    if walked is None or again is None:
        return
    options = BuildOptions(docs_base_url="http://mend.test")
    built = rewrite(walked, make(), agent_redactor(), options)
    from_memory = rewrite(again, make(), agent_redactor(), options)
    assert from_memory.envelope.as_dict() == built.envelope.as_dict()
    assert from_memory.redactions == built.redactions


@pytest.mark.parametrize(("file", "case"), pack_cases())
def test_pack_case_matches_from_memory_as_walked(file: Path, case: dict[str, Any]) -> None:
    """A pack case's response matches the same rule, with the same values found, and builds the
    same envelope, when it is matched from memory as when every candidate is tried."""
    replay = REPLAYS.pack(file, case)
    if replay is None:
        return  # a redaction case: nothing to match
    _check(replay.ruleset, replay.make)
    assert replay.ruleset.units is not None
    _check(replay.ruleset.units, replay.make)


@pytest.mark.parametrize("entry", corpus_entries())
def test_corpus_response_matches_from_memory_as_walked(entry: dict[str, Any]) -> None:
    """A recorded real-world response matches from memory exactly as when walked."""
    replay = REPLAYS.corpus(entry)
    _check(replay.ruleset, replay.make)


def _exchange(headers: dict[str, str], body: str = '{"error": "slow down"}') -> Exchange:
    return recorded_exchange(
        status=429,
        body=body.encode(),
        headers={"Content-Type": "application/json", **headers},
    )


def test_a_header_a_rule_reads_is_part_of_what_is_remembered() -> None:
    """The same body with another value of a header some rule reads (``Retry-After``) is a
    different response: it is matched, not answered with the first one's rule."""
    ruleset = _fresh()
    fractional = ruleset.match(_exchange({"Retry-After": "1.5"}))
    whole = ruleset.match(_exchange({"Retry-After": "7"}))
    assert fractional is not None
    assert whole is not None
    assert fractional.rule.id == "generic.fractional_retry_after"
    assert whole.rule.id != fractional.rule.id
    again = ruleset.match(_exchange({"Retry-After": "1.5"}))
    assert again is not None
    assert again.rule is fractional.rule
    assert again.found == fractional.found


def test_a_header_no_rule_reads_does_not_make_a_new_response() -> None:
    """Headers no rule names (``Date``) are not in the key: a response that differs only there
    is answered from memory."""
    ruleset = _fresh()
    memory = ruleset.memory
    assert memory is not None
    ruleset.match(_exchange({"Date": "Fri, 27 Nov 2026 18:00:00 GMT"}))
    ruleset.match(_exchange({"Date": "Fri, 27 Nov 2026 18:00:01 GMT"}))
    assert len(memory.entries) == 1


def test_found_values_are_copied_out_of_memory() -> None:
    """Changing the ``found`` of a remembered match does not change what the next gets."""
    ruleset = _fresh()
    first = ruleset.match(_exchange({"Retry-After": "1.5"}))
    assert first is not None
    expected = dict(first.found)
    first.found["wait"] = "changed"
    again = ruleset.match(_exchange({"Retry-After": "1.5"}))
    assert again is not None
    assert again.found == expected


def test_memory_is_bounded_by_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past its entry cap the memory drops its oldest response first."""
    monkeypatch.setattr(match_memory, "_MATCHES_MAX", 4)
    ruleset = _fresh()
    memory = ruleset.memory
    assert memory is not None
    for n in range(10):
        ruleset.match(_exchange({}, f'{{"error": "slow down", "n": {n}}}'))
    assert len(memory.entries) == 4
    assert memory.chars == sum(size for _, size in memory.entries.values())
    assert [key[7] for key in memory.entries] == [
        f'{{"error": "slow down", "n": {n}}}' for n in range(6, 10)
    ]


def test_memory_is_bounded_by_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    """The characters of the remembered keys stay under the budget, the oldest dropped first."""
    monkeypatch.setattr(match_memory, "_MATCH_CHARS_MAX", 300)
    ruleset = _fresh()
    memory = ruleset.memory
    assert memory is not None
    for n in range(10):
        ruleset.match(_exchange({}, f'{{"error": "slow down", "pad": "{"x" * 40}", "n": {n}}}'))
    assert 0 < memory.chars <= 300
    assert memory.chars == sum(size for _, size in memory.entries.values())


def test_a_long_body_is_matched_and_not_remembered() -> None:
    """A body longer than ``_MATCH_TEXT_MAX`` is matched every time, never remembered."""
    ruleset = _fresh()
    memory = ruleset.memory
    assert memory is not None
    body = '{"error": "' + "x" * (match_memory._MATCH_TEXT_MAX + 1) + '"}'
    match = ruleset.match(_exchange({}, body))
    assert match is not None
    assert match.rule.id == ruleset.walk(_exchange({}, body)).rule.id  # type: ignore[union-attr]
    assert not memory.entries


def test_a_document_orjson_cannot_write_is_not_remembered() -> None:
    """A JSON document with an integer past 64 bits has no key: matched, not remembered."""
    ruleset = _fresh()
    memory = ruleset.memory
    assert memory is not None
    exchange = _exchange({})
    exchange.json = {"error": "slow down", "n": 1 << 70}
    assert ruleset.match(exchange) is not None
    assert not memory.entries


def test_a_rule_that_does_not_say_what_it_reads_turns_memory_off() -> None:
    """A rule made by hand (no ``headers_read``) may read any header: no memory for its set."""
    shipped = _fresh().rules
    by_hand = Rule(
        id="by.hand",
        pack="test",
        source="test",
        description=None,
        statuses=frozenset({429}),
        predicates=(),
        queries=(),
        envelope=shipped[0].envelope,
        docs=None,
        body_pattern=None,
    )
    ruleset = RuleSet.build([by_hand, *shipped])
    assert ruleset.memory is None
    match = ruleset.match(_exchange({}))
    assert match is not None
    assert match.rule.id == "by.hand"
