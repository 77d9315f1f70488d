"""From a matched rule to the envelope: defaults, retry timing, redaction of what is substituted."""

from __future__ import annotations

import re
from typing import Any

import pytest

from proxy.policy.envelope import upstream_detail, variables
from proxy.policy.envelope.build import BuildOptions, upstream_message
from proxy.policy.evaluate import evaluate, recorded_exchange
from proxy.policy.redaction import Redactor
from proxy.policy.regex import linear
from proxy.policy.rules.rule import Rule
from proxy.policy.rules.rulefile import load_rule_text
from proxy.policy.rules.ruleset import RuleSet

RULES = """\
rules:
  - id: t.throttle
    when: {status: 429, body: "available in (?P<wait>\\\\d+) seconds"}
    envelope: {code: RATE_LIMITED, category: rate_limit, retry_after_ms: "{{ wait | ms }}"}
  - id: t.echo
    when: {status: 400}
    vars: {msg: message}
    envelope: {code: ECHO, category: validation, message: "Upstream said: {{ msg }}"}
  - id: t.next
    when: {status: 409}
    vars: {order: "order_id"}
    envelope:
      code: NOT_CONFIRMED
      category: precondition
      action: call_other_operation
      next_operation: "POST /orders/{{ order }}/confirm"
      next_operation_args: {order_id: "{{ order }}"}
  - id: t.unavailable
    when: {status: [502, 503]}
    envelope: {code: DOWN, category: unavailable}
  - id: t.methods
    when: {status: 405}
    envelope:
      code: NO_METHOD
      category: method_not_allowed
      hint: "Use a method in allowed_values."
      steps: ["Pick a method from allowed_values.", "Send it again."]
      allowed_values: "{{ headers.allow | split }}"
"""
OPTIONS = BuildOptions(
    retry_after_default_ms=1500, retry_after_max_ms=60_000, docs_base_url="http://m"
)


def envelope(status: int, body: str, **kw: Any) -> Any:
    rules = RuleSet.build([Rule.compile(r) for r in load_rule_text(RULES, "t.yaml", "t")])
    headers = kw.pop("headers", {})
    if body.startswith("{"):
        headers["Content-Type"] = "application/json"
    ex = recorded_exchange(status=status, body=body.encode(), headers=headers, **kw)
    evaluation = evaluate(rules, ex, Redactor(), OPTIONS)
    assert evaluation is not None
    return evaluation.envelope


def test_retry_after_from_a_body_capture() -> None:
    """A rule can read the wait from the body (DRF: 'Expected available in 7 seconds')."""
    env = envelope(429, "Request was throttled. Expected available in 7 seconds.")
    assert (env.retryable, env.retry_after_ms, env.action.value) == (True, 7000, "retry")


@pytest.mark.parametrize(
    ("headers", "expected"),
    [({}, 1500), ({"Retry-After": "9999"}, 60_000), ({"Retry-After": "2"}, 2000)],
)
def test_retry_after_default_and_cap(headers: dict[str, str], expected: int) -> None:
    """No hint gives the configured default; a huge one is capped."""
    assert envelope(503, "down", headers=headers).retry_after_ms == expected


def test_defaults_follow_category_and_action() -> None:
    """A rule giving only code and category still gets action, severity, hint and steps."""
    env = envelope(503, "down")
    assert env.action.value == "retry"
    assert env.severity.value == "error"
    assert env.hint
    assert env.steps
    assert env.docs_url == "http://m/_mend/errors/DOWN"


def test_next_operation_is_filled_from_variables() -> None:
    """call_other_operation names the operation and its arguments."""
    env = envelope(409, '{"order_id": 17}')
    assert env.next_operation == "POST /orders/17/confirm"
    assert env.next_operation_args == {"order_id": 17}
    assert env.retryable is False


def test_secrets_in_substituted_values_are_scrubbed() -> None:
    """What a template pulls from the body goes through the redactor."""
    env = envelope(400, '{"message": "bad key sk_live_abcdefghijklmnop1234 in request"}')
    assert "sk_live_abcdefghijklmnop1234" not in env.message
    assert env.message.startswith("Upstream said:")


@pytest.mark.parametrize(
    ("method", "headers", "warned"),
    [
        ("POST", {}, True),
        ("PATCH", {}, True),
        ("GET", {}, False),
        ("POST", {"Idempotency-Key": "k"}, False),
    ],
)
def test_non_idempotent_retry_after_502_warns(
    method: str, headers: dict[str, str], warned: bool
) -> None:
    """A 502 after a write may mean the write happened: the hint says to check first."""
    env = envelope(502, "bad gateway", method=method, request_headers=headers)
    assert ("may already have taken effect" in env.hint) is warned
    assert env.retryable


@pytest.mark.parametrize(
    ("body", "content_type", "expected"),
    [
        ('{"message": "Order 7 not found"}', "application/json", "Order 7 not found"),
        ('{"error": {"message": "Card declined"}}', "application/json", "Card declined"),
        ('{"errors": [{"message": "Bad field"}]}', "application/json", "Bad field"),
        (
            "<html><title>503 Service Temporarily Unavailable</title></html>",
            "text/html",
            "503 Service Temporarily Unavailable",
        ),
        ("404 page not found\n", "text/plain", "404 page not found"),
        ("", "text/plain", None),
        (
            '{"errcode": 40001, "errmsg": "invalid credential"}',
            "application/json",
            "invalid credential",
        ),
        (
            '{"error_code": "X", "error_message": "no such order"}',
            "application/json",
            "no such order",
        ),
        ('{"errorMessage": "no such order"}', "application/json", "no such order"),
        ('{"status": 404, "reason": "no such order"}', "application/json", "no such order"),
    ],
)
def test_upstream_message_is_found_generically(
    body: str, content_type: str, expected: str | None
) -> None:
    """The upstream's own sentence is found in JSON, HTML and text bodies."""
    ex = recorded_exchange(status=404, body=body.encode(), headers={"Content-Type": content_type})
    assert upstream_message(ex) == expected


EXTRA_RULES = """\
rules:
  - id: x.written
    when: {status: 400, body: 'field (?P<name>\\w+) must be one of (?P<choices>[a-z, ]+)'}
    envelope:
      code: WRITTEN
      category: validation
      invalid_fields:
        - {field: "{{ name }}", reason: "not allowed", received: "{{ name }}"}
  - id: x.camel
    when: {status: 422}
    envelope:
      code: CAMEL
      category: validation
      invalid_fields: {each: "errors", field_case: camel}
  - id: x.one_field
    when: {status: 418}
    vars: {param: param, said: errmsg}
    envelope:
      code: ONE_FIELD
      category: validation
      message: "{{ said }}"
      field: "/{{ param }}"
  - id: x.empty
    when: {status: 503}
    vars: {said: nothing_here}
    envelope:
      code: DOWN
      category: unavailable
      message: "A service it depends on is unavailable ({{ said }})."
      steps: ["Wait ({{ said }}) retry_after_ms.", "Send it again unchanged."]
  - id: x.jsonapi
    when: {status: 409}
    envelope:
      code: POINTERS
      category: validation
      invalid_fields: {each: "errors", field: "source.pointer", reason: detail}
"""


def extra_envelope(status: int, body: str) -> Any:
    rules = RuleSet.build([Rule.compile(r) for r in load_rule_text(EXTRA_RULES, "x.yaml", "x")])
    headers = {"Content-Type": "application/json"} if body.startswith("{") else {}
    ex = recorded_exchange(status=status, body=body.encode(), headers=headers)
    evaluation = evaluate(rules, ex, Redactor(), OPTIONS)
    assert evaluation is not None
    return evaluation.envelope


def test_invalid_fields_written_in_the_rule() -> None:
    """A rule can list invalid fields itself when the upstream only says them in prose."""
    env = extra_envelope(400, "field colour must be one of red, blue")
    assert [(f.field, f.received) for f in env.invalid_fields] == [("/colour", "colour")]
    assert env.field == "/colour"


def test_a_single_field_names_one_invalid_field() -> None:
    """A rule giving only ``field:`` lists that field in invalid_fields, its reason the
    message, its bounds read from it, and a step that names it."""
    env = extra_envelope(418, '{"errmsg": "qty must be between 1 and 99", "param": "qty"}')
    assert [(f.field, f.reason, f.allowed_values) for f in env.invalid_fields] == [
        ("/qty", "qty must be between 1 and 99", {"minimum": 1, "maximum": 99})
    ]
    assert env.steps[0] == "Change /qty: qty must be between 1 and 99."


def test_a_value_left_empty_leaves_no_empty_parentheses() -> None:
    """A template's "(...)" around a value the upstream did not give is dropped with it, in
    the message and the steps."""
    env = extra_envelope(503, '{"error": "down"}')
    assert env.message == "A service it depends on is unavailable."
    assert env.steps[0] == "Wait retry_after_ms."


def test_field_case_camel_matches_request_json() -> None:
    """ASP.NET's ``Qty`` names the request's ``qty``."""
    env = extra_envelope(422, '{"errors": {"Items[0].Qty": ["must be positive"]}}')
    assert [f.field for f in env.invalid_fields] == ["/items/0/qty"]


def test_pointers_made_of_json_keys_are_not_mistaken_for_paths() -> None:
    """JSON:API's /data/attributes/qty survives redaction; it names a field, not a file."""
    env = extra_envelope(
        409, '{"errors": [{"source": {"pointer": "/data/attributes/qty"}, "detail": "too big"}]}'
    )
    assert [f.field for f in env.invalid_fields] == ["/data/attributes/qty"]


def test_a_hint_citing_a_field_it_has_is_kept() -> None:
    """The rule's hint and steps stand when the field they cite has a value."""
    env = envelope(405, "", headers={"Allow": "GET, HEAD"})
    assert env.allowed_values == ["GET", "HEAD"]
    assert env.hint == "Use a method in allowed_values."
    assert env.steps[0] == "Pick a method from allowed_values."


def test_a_hint_never_cites_a_null_field() -> None:
    """Without ``Allow`` the hint and steps that cite ``allowed_values`` give way to the
    action's own, which cite nothing empty."""
    env = envelope(405, "")
    assert env.allowed_values is None
    assert "allowed_values" not in env.hint
    assert not any("allowed_values" in step for step in env.steps)


def test_single_line_folds_exactly_the_whitespace_a_regex_folds() -> None:
    """Every character ``\\s`` matches (and no other) folds into one space, ends stripped."""
    spaces = [chr(c) for c in range(0x3100) if chr(c).isspace()] + ["\u3000"]
    text = "".join(f"{s}w{n}{s}{s}" for n, s in enumerate(spaces)) + "\u200b end\xa0"
    expected = re.sub(r"\s+", " ", text).strip()
    assert variables.single_line(text, 10_000) == expected
    assert variables.single_line(" a \n\t b ", 500) == "a b"
    assert variables.single_line("x" * 600) == "x" * 499 + "…"


_INTERNAL_RE2 = linear(
    r"(?i)^(?:stack|stacktrace|stack_trace|trace|traceback|backtrace|exception|exc_info|"
    r"file|filename|line|lineno|sql|query|debug|cause|internal|innererror|inner_error)$"
)
_TOKEN_RE2 = linear(r"^[A-Za-z][A-Za-z0-9_.:-]{0,63}$")


@pytest.mark.parametrize(
    "text",
    [
        "stack",
        "StackTrace",
        "SQL",
        "\u017ftack",  # the long s folds to s in RE2
        "\u212aey",
        "lineno ",
        "line\n",
        "file_name",
        "inner_error",
        "INNERERROR",
        "item_locked",
        "E_LOCKED",
        "a" * 64,
        "a" * 65,
        "1abc",
        "abc def",
        "abc\n",
        "é",
        "",
        "code:v1.2-x",
    ],
)
def test_upstream_detail_names_and_tokens_read_as_re2_read_them(text: str) -> None:
    """The internal-member names and the bare-token test decide as the RE2 patterns did."""
    assert upstream_detail._internal(text) is (_INTERNAL_RE2.search(text) is not None)
    assert upstream_detail.is_token(text) is (_TOKEN_RE2.search(text) is not None)
