"""``build``'s memory: an envelope built before for the same response, request line, values found
and options is given again, with this request's id.

Every pack case and corpus response is built with three request ids (the first builds, the
others come from memory) and compared with ``_build``, which never remembers.
"""

from __future__ import annotations

import json
from email.utils import formatdate
from pathlib import Path
from typing import Any

import pytest

from proxy.policy.envelope import build as build_module
from proxy.policy.envelope.build import BuildOptions
from proxy.policy.envelope.variables import Lookup
from proxy.policy.evaluate import agent_redactor, recorded_exchange, rewrite, scrubber
from proxy.policy.exchange import Exchange
from proxy.policy.redaction import Redactor
from proxy.policy.rules.compiled_envelope import CompiledEnvelope
from proxy.policy.rules.rule import Match
from proxy.policy.rules.ruleset import RuleSet
from proxy.policy.rules.rulespec import EnvelopeSpec
from proxy.tools.ruletest.engines import Engines
from tests.policy.memory_cases import Replays, corpus_entries, pack_cases

REPLAYS = Replays()
OPTIONS = BuildOptions(docs_base_url="http://mend.test")


def _fresh(
    match: Match, exchange: Exchange, redactor: Redactor
) -> tuple[dict[str, Any], list[str]]:
    """The envelope and kinds ``_build`` makes: nothing of the envelope remembered."""
    kinds: list[str] = []
    scrub = scrubber(redactor, exchange, kinds)
    compiled = match.rule.envelope
    lookup = Lookup(exchange, match.found)
    decided = build_module._retry(compiled, exchange, lookup, scrub, OPTIONS)
    envelope = build_module._build(compiled, exchange, scrub, OPTIONS, lookup, decided)
    return envelope.as_dict(), kinds


def _check(ruleset: RuleSet, make: Any, redactor: Redactor) -> None:
    match = ruleset.walk(make())
    if match is None:
        return
    for request_id in ("req_first", "req_second", "req_third"):
        exchange = make()
        exchange.request_id = request_id
        built = rewrite(match, exchange, redactor, OPTIONS)
        fresh = make()
        fresh.request_id = request_id
        envelope, kinds = _fresh(match, fresh, redactor)
        assert built.envelope.as_dict() == envelope
        assert built.redactions == kinds


@pytest.mark.parametrize(("file", "case"), pack_cases())
def test_pack_case_envelope_from_memory_as_built(file: Path, case: dict[str, Any]) -> None:
    """A pack case's envelope (and its redaction kinds) is the same from ``build``'s memory, with
    each request's own id, as built afresh."""
    if (replay := REPLAYS.pack(file, case)) is not None:
        _check(replay.ruleset, replay.make, replay.redactor)


@pytest.mark.parametrize("entry", corpus_entries())
def test_corpus_envelope_from_memory_as_built(entry: dict[str, Any]) -> None:
    """A recorded real-world response's envelope is the same from memory as built afresh."""
    replay = REPLAYS.corpus(entry)
    _check(replay.ruleset, replay.make, replay.redactor)


SPRING_500 = {
    "timestamp": "2026-11-22T04:05:06.789+00:00",
    "status": 500,
    "error": "Internal Server Error",
    "message": "could not execute statement",
    "path": "/orders",
}


def _exchange(request_id: str, method: str = "GET") -> Exchange:
    exchange = recorded_exchange(
        status=500,
        body=json.dumps(SPRING_500).encode(),
        headers={"Content-Type": "application/json"},
        method=method,
        path="/orders",
    )
    exchange.request_id = request_id
    return exchange


def _spring() -> Match:
    ruleset = Engines().get().routes["default"]
    match = ruleset.match(_exchange("req_a"))
    assert match is not None
    assert not match.rule.envelope.live
    return match


def test_a_remembered_envelope_carries_this_requests_id() -> None:
    """The second request's envelope comes from memory with its own request id, as a new
    object each time."""
    match = _spring()
    redactor = agent_redactor()
    first = rewrite(match, _exchange("req_a"), redactor, OPTIONS).envelope
    second = rewrite(match, _exchange("req_b"), redactor, OPTIONS).envelope
    third = rewrite(match, _exchange("req_b"), redactor, OPTIONS).envelope
    assert len(match.rule.envelope.built.entries) == 1
    assert (first.request_id, second.request_id) == ("req_a", "req_b")
    assert {**first.as_dict(), "request_id": "req_b"} == second.as_dict()
    assert second is not third


def test_another_request_line_is_another_entry() -> None:
    """The method and path are in the hint and steps: another method builds anew."""
    match = _spring()
    redactor = agent_redactor()
    get = rewrite(match, _exchange("req_a"), redactor, OPTIONS).envelope
    post = rewrite(match, _exchange("req_a", "POST"), redactor, OPTIONS).envelope
    assert len(match.rule.envelope.built.entries) == 2
    assert "GET /orders" in get.hint
    assert "POST /orders" in post.hint


def test_other_options_are_another_entry() -> None:
    """The docs link is the options': other options build anew."""
    match = _spring()
    redactor = agent_redactor()
    here = rewrite(match, _exchange("req_a"), redactor, OPTIONS).envelope
    there = rewrite(
        match, _exchange("req_a"), redactor, BuildOptions(docs_base_url="http://other.test")
    ).envelope
    assert (here.docs_url or "").startswith("http://mend.test/")
    assert (there.docs_url or "").startswith("http://other.test/")
    assert len(match.rule.envelope.built.entries) == 2


def _compiled(**envelope: Any) -> CompiledEnvelope:
    spec = EnvelopeSpec.model_validate({"code": "X_FAILED", "category": "internal", **envelope})
    return CompiledEnvelope.compile(spec, "test.rule")


@pytest.mark.parametrize(
    ("envelope", "live"),
    [
        ({}, False),
        ({"message": "{{ method }} {{ path }} failed: {{ upstream_message }}"}, False),
        ({"category": "unavailable"}, False),  # a retry: its wait is decided first, and keyed
        ({"message": "Failed, request {{ request_id }}."}, True),
        ({"hint": "Wait for {{ headers.x-reset }}."}, True),
        ({"steps": ["Send {{ request_headers.x-tenant }} again."]}, True),
    ],
)
def test_what_makes_an_envelope_live(envelope: dict[str, Any], live: bool) -> None:
    """An envelope that reads the clock (a retry), the request id or a header is never
    remembered; one that reads only the response, the request line and what was found is."""
    assert _compiled(**envelope).live is live


def test_a_live_rule_is_not_remembered() -> None:
    """A rule whose message names the request id builds every envelope anew."""
    compiled = _compiled(message="Failed, request {{ request_id }}.")
    redactor = agent_redactor()
    for request_id in ("req_a", "req_b"):
        exchange = _exchange(request_id)
        envelope = build_module.build(
            compiled, exchange, {}, scrubber(redactor, exchange, []), OPTIONS
        )
        assert envelope.message == f"Failed, request {request_id}."
    assert not compiled.built.entries


def _unavailable(retry_after: str) -> Exchange:
    return recorded_exchange(status=503, body=b"busy", headers={"Retry-After": retry_after})


def test_a_retrys_wait_is_part_of_what_is_remembered() -> None:
    """The same response with another ``Retry-After`` is another envelope, with its own wait;
    the same one again comes from memory."""
    ruleset = Engines().get().routes["default"]
    match = ruleset.match(_unavailable("3"))
    assert match is not None
    redactor = agent_redactor()
    three = rewrite(match, _unavailable("3"), redactor, OPTIONS).envelope
    five = rewrite(match, _unavailable("5"), redactor, OPTIONS).envelope
    again = rewrite(match, _unavailable("3"), redactor, OPTIONS).envelope
    assert (three.retry_after_ms, five.retry_after_ms, again.retry_after_ms) == (3000, 5000, 3000)
    assert len(match.rule.envelope.built.entries) == 2


def test_a_retry_after_an_http_date_is_measured_each_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``Retry-After`` that is a moment is measured on the clock for every response: a later
    response waits less, never the first one's wait from memory."""
    ruleset = Engines().get().routes["default"]
    moment = formatdate(1_800_000_060.0, usegmt=True)
    match = ruleset.match(_unavailable(moment))
    assert match is not None
    redactor = agent_redactor()
    waits = []
    for now in (1_800_000_000.0, 1_800_000_030.0):
        monkeypatch.setattr("proxy.policy.retry.retry.time.time", lambda now=now: now)
        waits.append(
            rewrite(match, _unavailable(moment), redactor, OPTIONS).envelope.retry_after_ms
        )
    assert waits == [60_000, 30_000]
