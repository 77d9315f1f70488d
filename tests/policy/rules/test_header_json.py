"""Rules that read a response header's JSON value (``json: [{header: ...}]``, ``invalid_fields:
{header: ...}``): Prism's ``sl-violations``, read as JSON, not by a regex over its text."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.config.yamlfile import RuleError
from proxy.policy.envelope.build import BuildOptions
from proxy.policy.evaluate import evaluate, recorded_exchange
from proxy.policy.redaction import Redactor
from proxy.policy.rules.header_json import HEADER_JSON_MAX
from proxy.policy.rules.rule import Rule
from proxy.policy.rules.rulefile import load_rule_text
from proxy.policy.rules.ruleset import RuleSet

RULES = """\
rules:
  - id: t.header
    when:
      status: 4xx
      json: [{header: X-Problems, query: "[0].message", matches: "(?P<reason>.+)"}]
    envelope:
      code: BAD_FIELDS
      category: validation
      message: "{{ reason }}"
      invalid_fields:
        header: x-problems
        each: "[?location]"
        field: location
        reason: message
        strip: [request, body, query, path, header]
  - id: t.body
    when: {status: 4xx, json: [{query: "errors[0].field"}]}
    envelope:
      code: BODY_FIELDS
      category: validation
      invalid_fields: {each: errors, field: field, reason: message}
"""


def _rules() -> RuleSet:
    return RuleSet.build([Rule.compile(r) for r in load_rule_text(RULES, "t.yaml", "t")])


def _envelope(rules: RuleSet, header: str | None, body: str = "") -> Any:
    headers = {"Content-Type": "application/json"} if body else {}
    if header is not None:
        headers["X-Problems"] = header
    exchange = recorded_exchange(status=400, body=body.encode(), headers=headers)
    evaluation = evaluate(rules, exchange, Redactor(), BuildOptions())
    return None if evaluation is None else evaluation.envelope


def _problems(*entries: tuple[list[str], str]) -> str:
    return json.dumps([{"location": loc, "message": msg} for loc, msg in entries])


def test_a_headers_json_is_queried_and_its_entries_are_the_invalid_fields() -> None:
    """Each entry is a field: its whole location list a pointer, its location where it is."""
    header = _problems(
        (["request", "body", "tags", "0", "id"], "must be integer"),
        (["request", "query", "state"], "must be one of open, closed"),
    )
    envelope = _envelope(_rules(), header)
    assert envelope.rule == "t.header"
    assert envelope.message == "must be integer"
    assert [(f.field, f.location) for f in envelope.invalid_fields] == [
        ("/tags/0/id", "body"),
        ("/state", "query"),
    ]


def test_the_header_wins_over_the_body_when_its_rule_comes_first() -> None:
    """A body the rule does not read is not what its fields are made of."""
    header = _problems((["request", "query", "state"], "bad"))
    body = json.dumps({"errors": [{"field": "string", "message": "string"}]})
    envelope = _envelope(_rules(), header, body)
    assert envelope.rule == "t.header"
    assert [f.field for f in envelope.invalid_fields] == ["/state"]
    assert _envelope(_rules(), None, body).rule == "t.body"


@pytest.mark.parametrize(
    "header",
    [
        None,  # absent
        "location=query.state",  # not JSON
        "[" * 100 + "]" * 100,  # nested too deep
        json.dumps([{"location": ["request"], "message": "x" * HEADER_JSON_MAX}]),  # too long
        json.dumps({"message": "not a list"}),
    ],
)
def test_a_header_that_holds_no_usable_json_matches_nothing(header: str | None) -> None:
    assert _envelope(_rules(), header) is None


def test_remembered_matches_and_fields_follow_the_header() -> None:
    """Two responses alike but for the header get each their own fields, asked again and again
    (the match and the envelope memories key by what the rule reads)."""
    rules = _rules()
    first = _problems((["request", "query", "a"], "bad a"))
    second = _problems((["request", "query", "b"], "bad b"))
    for _ in range(6):
        assert [f.field for f in _envelope(rules, first).invalid_fields] == ["/a"]
        assert [f.field for f in _envelope(rules, second).invalid_fields] == ["/b"]


@pytest.mark.parametrize("name", ["", "a b", "x:y", "n" * 65])
def test_a_header_name_is_checked_at_load(name: str) -> None:
    text = f"""\
rules:
  - id: t.bad
    when: {{status: 400, json: [{{header: "{name}", query: "a"}}]}}
    envelope: {{code: BAD, category: validation}}
"""
    with pytest.raises(RuleError, match="header"):
        load_rule_text(text, "t.yaml", "t")
