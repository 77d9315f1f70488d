"""Ordered rules: first match wins, indexed by status, 2xx only where asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.policy.evaluate import recorded_exchange
from proxy.policy.exchange import Exchange
from proxy.policy.rules.candidates import BodySets
from proxy.policy.rules.matchers import Found, Predicate, required_keys
from proxy.policy.rules.rule import Rule
from proxy.policy.rules.rulefile import load_rule_text
from proxy.policy.rules.ruleset import RuleSet
from proxy.policy.rules.rulespec import When
from proxy.tools.ruletest.cases import RequestSpec, ResponseSpec
from proxy.tools.ruletest.engines import Engines, exchange_for
from proxy.tools.ruletest.loading import load_cases

RULES = """\
rules:
  - id: t.specific
    when:
      status: 500
      body: "deadlock detected on (?P<table>\\\\w+)"
    envelope: {code: DEADLOCK, category: dependency, action: retry}
  - id: t.json
    when:
      status: [400, 422]
      json: [{query: "error.type", equals: card_error}]
    vars: {param: "error.param"}
    envelope: {code: CARD_DECLINED, category: validation}
  - id: t.any
    when:
      status: 4xx
      any:
        - {headers: {x-kind: "^alpha$"}}
        - {path: "/beta/**"}
    envelope: {code: ALPHA_OR_BETA, category: validation}
  - id: t.not
    when:
      status: 404
      not: {method: GET}
    envelope: {code: NOT_GET_404, category: not_found}
  - id: t.success
    when:
      status: 200
      json: [{query: "ok", equals: false}]
    envelope: {code: OPERATION_FAILED, category: validation}
  - id: t.generic
    when: {status: 5xx}
    envelope: {code: GENERIC, category: internal}
"""


def ruleset(success: tuple[str, ...] = ()) -> RuleSet:
    return RuleSet.build([Rule.compile(r) for r in load_rule_text(RULES, "t.yaml", "t")], success)


def exchange(status: int, body: str = "", **kw: Any) -> Any:
    headers = kw.pop("headers", {})
    if body.startswith("{"):
        headers.setdefault("Content-Type", "application/json")
    return recorded_exchange(status=status, body=body.encode(), headers=headers, **kw)


@pytest.mark.parametrize(
    ("ex", "rule"),
    [
        (exchange(500, "ERROR: deadlock detected on orders"), "t.specific"),
        (exchange(500, "something else"), "t.generic"),
        (exchange(402, '{"error": {"type": "card_error"}}'), None),
        (exchange(422, '{"error": {"type": "card_error", "param": "amount"}}'), "t.json"),
        (exchange(418, "", headers={"X-Kind": "alpha"}), "t.any"),
        (exchange(418, "", path="/beta/x/y"), "t.any"),
        (exchange(418, "", path="/gamma"), None),
        (exchange(404, "", method="DELETE"), "t.not"),
        (exchange(404, "", method="GET"), None),
        (exchange(200, '{"ok": false}'), None),  # 2xx not asked for on this route
    ],
)
def test_first_match_wins(ex: Any, rule: str | None) -> None:
    """Each exchange is claimed by the first rule whose every condition holds."""
    match = ruleset().match(ex)
    assert (match.rule.id if match else None) == rule


def test_regex_groups_and_vars_become_found_variables() -> None:
    """Named regex groups and JMESPath vars are handed to the envelope."""
    match = ruleset().match(exchange(500, "deadlock detected on invoices"))
    assert match is not None
    assert match.found == {"table": "invoices"}
    match = ruleset().match(exchange(422, '{"error": {"type": "card_error", "param": "amount"}}'))
    assert match is not None
    assert match.found["param"] == "amount"


def test_success_rules_run_only_where_named() -> None:
    """A 2xx rule takes part only when the route's success_rules glob names it."""
    ex = exchange(200, '{"ok": false}')
    assert not ruleset().inspects(200)
    named = ruleset(("t.succ*",))
    assert named.inspects(200)
    match = named.match(ex)
    assert match is not None
    assert match.rule.id == "t.success"
    assert named.match(exchange(200, '{"ok": true}')) is None


def test_index_skips_rules_for_other_statuses() -> None:
    """Only rules that can match a status are walked for it."""
    index = ruleset().index
    assert [r.id for r in index[500]] == ["t.specific", "t.generic"]
    assert [r.id for r in index[404]] == ["t.any", "t.not"]


def test_explain_names_the_failing_condition() -> None:
    """explain shows, for each earlier rule, the first condition that failed."""
    verdicts = ruleset().explain(exchange(500, "plain failure"))
    by_id = {v.rule.id: v for v in verdicts}
    assert "body ~" in by_id["t.specific"].reason
    assert by_id["t.generic"].matched
    assert "status 500" in by_id["t.json"].reason


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the rules whose conditions a test's matching evaluated, in order."""
    seen: list[str] = []
    original = Rule.test

    def counted(rule: Rule, ex: Exchange) -> tuple[bool, Found, Predicate | None]:
        seen.append(rule.id)
        return original(rule, ex)

    monkeypatch.setattr(Rule, "test", counted)
    return seen


def _many_body_rules(count: int) -> str:
    rules = "".join(
        f"  - id: many.r{i}\n    when: {{status: 500, body: 'Marker{i:04d}Exception'}}\n"
        f"    envelope: {{code: M{i}, category: internal}}\n"
        for i in range(count)
    )
    return (
        f"rules:\n{rules}  - id: many.last\n    when: {{status: 500}}\n"
        "    envelope: {code: LAST, category: internal}\n"
    )


@pytest.mark.parametrize(
    ("body", "rule"),
    [
        ("boom Marker0000Exception here", "many.r0"),
        ("boom Marker0042Exception here", "many.r42"),
        ("Marker0099Exception and Marker0003Exception", "many.r3"),  # order still decides
        ("nothing to see", "many.last"),
    ],
)
def test_body_prefilter_keeps_first_match_semantics(body: str, rule: str) -> None:
    """With a hundred body rules on one status, the RE2 set prefilter changes speed, not results."""
    rules = [Rule.compile(r) for r in load_rule_text(_many_body_rules(100), "m.yaml", "m")]
    ruleset = RuleSet.build(rules)
    assert 500 in ruleset.prefiltered
    match = ruleset.match(exchange(500, body))
    assert match is not None
    assert match.rule.id == rule


def test_body_patterns_compile_at_the_first_response_that_needs_them() -> None:
    """Building rule sets compiles no RE2 set: a sidecar that never sees an error never pays."""
    rules = [Rule.compile(r) for r in load_rule_text(_many_body_rules(20), "m.yaml", "m")]
    ruleset = RuleSet.build(rules)
    prefilter = ruleset.prefiltered[500].prefilter
    assert prefilter.compiled is False
    ruleset.match(exchange(500, "Marker0007Exception"))
    assert prefilter.compiled is True


def test_rule_sets_of_one_engine_share_the_sets_of_the_same_rules() -> None:
    """Two routes with the same body rules hold one RE2 set, whichever route compiles it."""
    rules = [Rule.compile(r) for r in load_rule_text(_many_body_rules(20), "m.yaml", "m")]
    sets = BodySets()
    first = RuleSet.build(rules, sets=sets)
    second = RuleSet.build(rules, success_rules=("*",), sets=sets)
    assert len(sets) == 1
    assert first.prefiltered[500].prefilter is second.prefiltered[500].prefilter
    assert first.match(exchange(500, "x Marker0013Exception")).rule.id == "many.r13"  # type: ignore[union-attr]
    assert second.match(exchange(500, "x Marker0003Exception")).rule.id == "many.r3"  # type: ignore[union-attr]


def test_statuses_with_the_same_rules_share_one_bucket() -> None:
    """The 5xx of a pack that names ``5xx`` hold one list of rules, not a copy per status."""
    rules = [Rule.compile(r) for r in load_rule_text(_many_body_rules(20), "m.yaml", "m")]
    rules += [
        Rule.compile(r)
        for r in load_rule_text(
            _many_body_rules(20).replace("500", "5xx").replace("many.", "five."), "f.yaml", "f"
        )
    ]
    ruleset = RuleSet.build(rules)
    assert ruleset.index[502] is ruleset.index[503]
    assert ruleset.prefiltered[502] is ruleset.prefiltered[599]
    assert ruleset.index[500] is not ruleset.index[501]


@pytest.mark.parametrize(
    ("body", "tested"),
    [
        ("nothing to see", ["many.last"]),
        ("boom Marker0042Exception here", ["many.r42"]),
        ("Marker0099Exception and Marker0003Exception", ["many.r3"]),
    ],
)
def test_only_rules_whose_body_regex_the_set_saw_are_tested(
    body: str, tested: list[str], ran: list[str]
) -> None:
    """Of a thousand body rules on one status, a response meets the rules without a body regex
    and those whose regex the set saw match, in rule order, and no others."""
    rules = [Rule.compile(r) for r in load_rule_text(_many_body_rules(1000), "m.yaml", "m")]
    ruleset = RuleSet.build(rules)
    ruleset.match(exchange(500, body))
    assert ran == tested


def winner(rules: RuleSet, status: int, body: str) -> str | None:
    """The id of the rule that matches, or None."""
    match = rules.match(exchange(status, body))
    return match.rule.id if match else None


def _body_rules_and_t(count: int) -> RuleSet:
    rules = [Rule.compile(r) for r in load_rule_text(_many_body_rules(count), "m.yaml", "m")]
    rules += [Rule.compile(r) for r in load_rule_text(RULES, "t.yaml", "t")]
    return RuleSet.build(rules)


def test_one_rule_set_tells_shapes_apart() -> None:
    """Candidates are remembered per response shape: a body that hits another regex, or has
    other keys, on the same status is matched afresh, and a shape met again gets its old answer."""
    ruleset = _body_rules_and_t(100)
    bodies = [
        ("nothing to see", "many.last"),
        ("boom Marker0042Exception here", "many.r42"),
        ('{"error": {"type": "x"}, "m": "Marker0007Exception"}', "many.r7"),
        ("boom Marker0042Exception here", "many.r42"),
        ('{"error": {"type": "x"}}', "many.last"),
    ]
    for body, rule in bodies:
        assert winner(ruleset, 500, body) == rule, body


def test_the_memory_of_shapes_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every body hitting another regex is another shape: the memory starts over, answers hold."""
    monkeypatch.setattr("proxy.policy.rules.ruleset._SHAPES_MAX", 4)
    rules = _body_rules_and_t(100)
    for n in range(20):
        assert winner(rules, 500, f"boom Marker{n:04d}Exception") == f"many.r{n}"
        assert len(rules._shapes) <= 4


def test_a_shape_holds_only_the_key_paths_rules_ask_for() -> None:
    """Bodies keyed by what an agent sent (field names, ids) are one shape, not one each, and
    the shape keeps none of their keys: memory is bounded by the rules, not by upstream data."""
    rules = ruleset()
    for n in range(50):
        body = f'{{"error": {{"type": "card_error", "{"k" * 1000}{n}": 1}}, "id{n}": {n}}}'
        assert winner(rules, 422, body) == "t.json"
    [shape] = rules._shapes
    assert shape[2] == {"error\x00type"}


def test_a_query_upstream_data_cannot_answer_falls_through() -> None:
    """``length(errors)`` on ``{"errors": 5}`` fails that rule, not the request."""
    text = """\
rules:
  - id: t.many
    when: {status: 400, json: [{query: "length(errors) > `1`"}]}
    envelope: {code: MANY, category: validation}
  - id: t.rest
    when: {status: 400}
    envelope: {code: REST, category: validation}
"""
    rules = RuleSet.build([Rule.compile(r) for r in load_rule_text(text, "t.yaml", "t")], ())
    match = rules.match(exchange(400, '{"errors": 5}'))
    assert match is not None
    assert match.rule.id == "t.rest"


def _corpus() -> list[Any]:
    """Every recorded response the repository holds: held-out corpus and pack test cases."""
    root = Path(__file__).resolve().parents[2]
    found: list[Any] = []
    for file in sorted((root / "corpus" / "heldout").glob("*.yaml")):
        for case in yaml.safe_load(file.read_text(encoding="utf-8"))["cases"]:
            found.append(
                (
                    RequestSpec.model_validate(case.get("request") or {}),
                    ResponseSpec.model_validate(case["response"]),
                )
            )
    cases, _ = load_cases([root.parent / "rules" / "tests"])
    found.extend((c.case.request, c.case.response) for c in cases)
    return found


@pytest.mark.parametrize(
    ("body", "skipped"),
    [
        ('{"error": "rate limit exceeded"}', True),  # error is not an object
        ('{"error": {"message": "x"}}', True),  # an object without status
        ('{"error": {"status": "INVALID_ARGUMENT"}}', False),
        ('{"errors": [], "error": {"status": 1}}', False),
    ],
)
def test_a_rule_is_skipped_when_a_nested_key_it_needs_is_absent(
    body: str, skipped: bool, ran: list[str]
) -> None:
    """``error.status`` conditions are not evaluated on bodies whose ``error`` lacks ``status``."""
    text = """\
rules:
  - id: t.grpc
    when: {status: 429, json: [{query: "error.status", equals: INVALID_ARGUMENT}]}
    envelope: {code: BAD, category: validation}
"""
    rules = RuleSet.build([Rule.compile(r) for r in load_rule_text(text, "t.yaml", "t")])
    rules.match(exchange(429, body))
    assert (ran == []) is skipped


def test_skipping_rules_never_changes_the_winner() -> None:
    """The status index, body prefilter, JSON key requirements and the memory of shapes only
    skip rules that fail."""
    rules = Engines().get(success_rules=("*",)).routes["default"]
    checked = 0
    corpus = _corpus()
    # twice, the second time backwards: shapes met before are answered from memory
    for request, response in [*corpus, *reversed(corpus)]:
        ex = exchange_for(request, response)
        brute = next((r.id for r in rules.rules if ex.status in r.statuses and r.test(ex)[0]), None)
        indexed = rules.match(ex)
        assert (indexed.rule.id if indexed else None) == brute, response
        checked += 1
    assert checked > 800


@pytest.mark.parametrize(
    ("when", "requires"),
    [
        ({"json": [{"query": "detail[0].loc"}]}, [{"detail"}]),
        ({"json": [{"query": "errors || error.errors"}]}, [{"errors", "error\x00errors"}]),
        ({"json": [{"query": "error.type", "equals": "card_error"}]}, [{"error\x00type"}]),
        ({"json": [{"query": "error.details[0].reason"}]}, [{"error\x00details"}]),
        ({"json": [{"query": "error.type", "equals": None}]}, []),
        ({"json": [{"query": "code", "one_of": [3, None]}]}, []),
        ({"json": [{"query": "code", "exists": False}]}, []),
        ({"json": [{"query": "type(message)", "equals": "string"}]}, []),
        ({"json": [{"query": "ok", "equals": False}, {"query": "error"}]}, [{"ok"}, {"error"}]),
        ({"any": [{"json": [{"query": "a"}]}, {"json": [{"query": "b.c"}]}]}, [{"a", "b\x00c"}]),
        ({"any": [{"json": [{"query": "a"}]}, {"body": "x"}]}, []),
        ({"all": [{"json": [{"query": "a"}]}], "not": {"json": [{"query": "b"}]}}, [{"a"}]),
    ],
)
def test_required_keys(when: dict[str, Any], requires: list[set[str]]) -> None:
    """Only conditions that are certainly false on a missing key make a requirement.

    Two-level paths are joined by NUL: ``error.type`` needs an ``error`` object with ``type``.
    """
    assert [set(r) for r in required_keys(When.model_validate(when))] == requires


@pytest.mark.parametrize(
    ("body", "matched"),
    [
        ('{"ok": false}', True),
        ('{"ok": 0}', False),
        ('{"ok": "false"}', False),
        ('{"state": 1}', False),
        ('{"state": "up"}', True),
    ],
)
def test_json_equality_is_jmespath_equality(body: str, matched: bool) -> None:
    """``equals: false`` is not met by 0, nor ``one_of: [true, up]`` by 1 (Python would say so)."""
    text = """\
rules:
  - id: t.false
    when: {status: 200, json: [{query: "ok", equals: false}]}
    envelope: {code: NOT_OK, category: validation}
  - id: t.state
    when: {status: 200, json: [{query: "state", one_of: [true, "up"]}]}
    envelope: {code: STATE, category: validation}
"""
    rules = RuleSet.build([Rule.compile(r) for r in load_rule_text(text, "t.yaml", "t")], ("t.*",))
    assert (rules.match(exchange(200, body)) is not None) is matched
