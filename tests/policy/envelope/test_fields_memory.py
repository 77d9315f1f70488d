"""``scrubber.Remembered``: a rule's invalid fields and upstream detail remembered by redactor
and document (``Exchange.written``).

Every pack case and corpus response is built three times: with a plain scrub function (never
remembered), then twice through ``rewrite`` (the second from memory); the envelopes and the
redaction kinds must be the same.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.policy.envelope import build as build_module
from proxy.policy.envelope import scrubber
from proxy.policy.envelope.build import BuildOptions, build
from proxy.policy.envelope.scrubber import Scrubber
from proxy.policy.evaluate import Evaluation, agent_redactor, recorded_exchange, rewrite
from proxy.policy.exchange import Exchange
from proxy.policy.redaction import Redactor
from proxy.policy.rules.compiled_envelope import CompiledInvalidFields
from proxy.policy.rules.rule import Match
from proxy.policy.rules.ruleset import RuleSet
from proxy.tools.ruletest.engines import Engines
from tests.policy.memory_cases import Replays, corpus_entries, pack_cases

REPLAYS = Replays()
OPTIONS = BuildOptions(docs_base_url="http://mend.test")


def _plain(match: Match, exchange: Exchange, redactor: Redactor) -> Evaluation:
    """The evaluation built with a scrub that is a bare function: nothing is remembered."""
    kinds: list[str] = []

    def scrub(text: str) -> str:
        scrubbed = redactor.scrub(text)
        kinds.extend(scrubbed.kinds)
        return scrubbed.text

    return Evaluation(
        build(match.rule.envelope, exchange, match.found, scrub, OPTIONS), match, kinds
    )


def _check(ruleset: RuleSet, make: Any, redactor: Redactor) -> None:
    match = ruleset.walk(make())
    if match is None:
        return
    plain = _plain(match, make(), redactor)
    first = rewrite(match, make(), redactor, OPTIONS)
    again = rewrite(match, make(), redactor, OPTIONS)
    for evaluation in (first, again):
        assert evaluation.envelope.as_dict() == plain.envelope.as_dict()
        assert evaluation.redactions == plain.redactions


@pytest.mark.parametrize(("file", "case"), pack_cases())
def test_pack_case_fields_from_memory_as_built(file: Path, case: dict[str, Any]) -> None:
    """A pack case's envelope (its invalid fields, its redaction kinds) is the same built with a
    scrub that remembers nothing, the first time, and again from the rule's memory."""
    if (replay := REPLAYS.pack(file, case)) is not None:
        _check(replay.ruleset, replay.make, replay.redactor)


@pytest.mark.parametrize("entry", corpus_entries())
def test_corpus_fields_from_memory_as_built(entry: dict[str, Any]) -> None:
    """A recorded real-world response's envelope is the same built afresh and from memory."""
    replay = REPLAYS.corpus(entry)
    _check(replay.ruleset, replay.make, replay.redactor)


#: A FastAPI 422 whose reason holds a secret: scrubbing it reports a redaction kind.
SECRET_422: dict[str, list[dict[str, Any]]] = {
    "detail": [
        {
            "type": "value_error",
            "loc": ["body", "token"],
            "msg": "Value error, ghp_0123456789abcdefghijklmnopqrstuvwxyzAB is revoked",
            "input": "x",
        },
        {"type": "missing", "loc": ["body", "qty"], "msg": "Field required", "input": {}},
    ]
}


def _exchange(document: Any = SECRET_422, arguments: Any = None) -> Exchange:
    exchange = recorded_exchange(
        status=422,
        body=json.dumps(document).encode(),
        headers={"Content-Type": "application/json"},
    )
    exchange.arguments = arguments
    return exchange


def _fields(ruleset: RuleSet) -> tuple[Match, CompiledInvalidFields]:
    match = ruleset.match(_exchange())
    assert match is not None
    compiled = match.rule.envelope.invalid_fields
    assert isinstance(compiled, CompiledInvalidFields)
    return match, compiled


def _ruleset() -> RuleSet:
    return Engines().get().routes["default"]


def test_kinds_are_reported_again_from_memory() -> None:
    """The redaction kinds scrubbing the fields reported are reported again for a document the
    rule remembers, and the fields are equal."""
    match, compiled = _fields(_ruleset())
    redactor = agent_redactor()
    first = rewrite(match, _exchange(), redactor, OPTIONS)
    assert len(compiled.memory.entries) == 1
    again = rewrite(match, _exchange(), redactor, OPTIONS)
    assert first.redactions
    assert again.redactions == first.redactions
    assert again.envelope.invalid_fields == first.envelope.invalid_fields


def test_another_redactor_is_another_entry() -> None:
    """Fields scrubbed by one redactor are not given for another (its detectors may differ)."""
    match, compiled = _fields(_ruleset())
    rewrite(match, _exchange(), agent_redactor(), OPTIONS)
    rewrite(match, _exchange(), agent_redactor(), OPTIONS)
    assert len(compiled.memory.entries) == 2


def test_a_tool_calls_arguments_turn_memory_off() -> None:
    """With a tool call's arguments some values stay readable (echo): nothing is remembered."""
    match, compiled = _fields(_ruleset())
    rewrite(match, _exchange(arguments={"qty": 0}), agent_redactor(), OPTIONS)
    assert not compiled.memory.entries


def test_a_recording_redactor_turns_memory_off() -> None:
    """A redactor that records what it does (``mend explain --redact``) must see every text."""
    match, compiled = _fields(_ruleset())
    steps: list[str] = []
    redactor = Redactor(neutral="", note=lambda step, _: steps.append(step))
    rewrite(match, _exchange(), redactor, OPTIONS)
    assert not compiled.memory.entries


def test_fields_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past its entry cap a rule's memory drops its oldest document first, its character count
    kept exact."""
    monkeypatch.setattr(scrubber, "_REMEMBERED_MAX", 3)
    match, compiled = _fields(_ruleset())
    redactor = agent_redactor()
    for n in range(6):
        document = {"detail": [{**SECRET_422["detail"][1], "input": n}]}
        rewrite(match, _exchange(document), redactor, OPTIONS)
    memory = compiled.memory
    assert len(memory.entries) == 3
    assert memory.chars == sum(len(key[1]) for key in memory.entries)


def _fallback() -> Match:
    ruleset = _ruleset()
    match = ruleset.match(_exchange({"error": "slow down", "limit": 100, "window": "1m"}))
    assert match is not None
    assert match.rule.envelope.spec.upstream_detail
    return match


def test_an_upstream_detail_from_memory_is_a_copy() -> None:
    """Changing the upstream detail ``build`` got from the rule's memory does not change the
    next one's."""
    match = _fallback()
    compiled = match.rule.envelope
    exchange = _exchange({"error": "slow down", "limit": 100, "window": "1m"})
    redactor = agent_redactor()
    scrub = Scrubber(redactor.scrub, [], redactor).scrub
    first = build_module._upstream_detail(compiled, exchange, scrub)
    assert first == {"error": "slow down", "limit": 100, "window": "1m"}
    first["limit"] = 0
    again = build_module._upstream_detail(compiled, exchange, scrub)
    assert again == {"error": "slow down", "limit": 100, "window": "1m"}
    assert len(compiled.details.entries) == 1


def test_an_upstream_detail_is_remembered_per_status() -> None:
    """The detail drops a number equal to the status: another status is another entry."""
    match = _fallback()
    document = {"error": "slow down", "code": 429, "window": "1m"}
    redactor = agent_redactor()
    exchange = _exchange(document)
    exchange.status = 429
    as_429 = rewrite(match, exchange, redactor, OPTIONS).envelope.upstream_detail
    other = _exchange(document)
    other.status = 503
    as_503 = rewrite(match, other, redactor, OPTIONS).envelope.upstream_detail
    assert as_429 == {"error": "slow down", "window": "1m"}
    assert as_503 == {"error": "slow down", "code": 429, "window": "1m"}
    assert len(match.rule.envelope.details.entries) == 2


def test_written_follows_the_document() -> None:
    """``Exchange.written`` is the document as orjson writes it, made again when the document is
    replaced; ``None`` for a body that is not JSON or a document orjson cannot write."""
    exchange = _exchange({"a": 1})
    assert exchange.written() == b'{"a":1}'
    exchange.json = {"a": 1.0}
    assert exchange.written() == b'{"a":1.0}'
    exchange.json = {"a": 1 << 70}
    assert exchange.written() is None
    text = recorded_exchange(status=500, body=b"<html>no</html>", headers={})
    assert text.written() is None
