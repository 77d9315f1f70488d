"""The fallbacks' guidance, and what they keep of the upstream's own words.

A hint and its steps are read by the same agent: when they name different first actions ("fetch
and reconcile" against "correct the request"), it does one of them at random.
"""

from __future__ import annotations

from typing import Any

import pytest

from proxy.edge.catalog import example_envelope
from tests.policy.rules.test_packs import ENGINES, _run


def _first_word(text: str) -> str:
    return text.split(maxsplit=1)[0].strip(",;:.").lower()


def _rules() -> list[Any]:
    rules = ENGINES.get().rules
    return [
        pytest.param(rule, id=rule.id)
        for rule in rules
        if rule.is_fallback or rule.id.startswith("generic.")
    ]


@pytest.mark.parametrize("rule", _rules())
def test_hint_and_steps_start_with_the_same_action(rule: Any) -> None:
    """Every fallback and generic rule: the hint's first action is one of its steps' first
    actions (a hint written without steps gets default steps that say something else)."""
    envelope = example_envelope(rule)
    assert envelope is not None, "no envelope from the rule alone"
    assert envelope.steps, "no steps"
    firsts = {_first_word(step) for step in envelope.steps}
    assert _first_word(envelope.hint) in firsts, (envelope.hint, envelope.steps)


def test_fastapi_structured_409_detail_is_kept() -> None:
    """FastAPI HTTPException(409, detail={...}): the body FastAPI 0.165 sent (TestClient) keeps
    its members in upstream_detail and its message, and the guidance is to reconcile."""
    body = (
        '{"detail":{"code":"item_locked","lock_holder":"ana","unlock_at":"2026-11-25T04:00:00Z"}}'
    )
    result = _run(
        {"status": 409, "headers": {"content-type": "application/json"}, "body": body},
        {"method": "POST", "path": "/items/7/lock"},
    )
    assert result is not None
    env = result.envelope
    assert env.rule == "fallback.409"
    assert env.upstream_detail == {
        "code": "item_locked",
        "lock_holder": "ana",
        "unlock_at": "2026-11-25T04:00:00Z",
    }
    assert env.message == "item_locked (lock_holder: ana, unlock_at: 2026-11-25T04:00:00Z)"
    assert env.steps[0].startswith("Fetch the current state")


def test_flask_abort_description_is_the_message() -> None:
    """Flask abort(401, description="Bad credentials"): the page Flask 3.1 sent (test client)
    says "Bad credentials", not its title "401 Unauthorized"."""
    body = (
        "<!doctype html>\n<html lang=en>\n<title>401 Unauthorized</title>\n"
        "<h1>Unauthorized</h1>\n<p>Bad credentials</p>\n"
    )
    result = _run(
        {"status": 401, "headers": {"content-type": "text/html; charset=utf-8"}, "body": body}
    )
    assert result is not None
    assert (result.envelope.rule, result.envelope.message) == ("fallback.401", "Bad credentials")


def test_structured_detail_is_redacted_and_capped() -> None:
    """Secrets in a kept detail are masked; internals (stack, sql) and long strings are dropped."""
    detail = {
        "code": "locked",
        "token": "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
        "c2lnbmF0dXJlX3NpZ25hdHVyZQ",
        "stack": "Traceback (most recent call last): ...",
        "sql": "SELECT * FROM locks",
        "essay": "x" * 500,
        **{f"k{i}": i for i in range(30)},
    }
    result = _run({"status": 409, "json": {"detail": detail}})
    assert result is not None
    kept = result.envelope.upstream_detail
    assert kept is not None
    assert kept["code"] == "locked"
    assert "eyJhbGciOiJIUzI1NiJ9" not in str(kept)
    assert not {"stack", "sql", "essay"} & set(kept)
    assert len(kept) <= 12


def test_plain_bodies_keep_no_detail() -> None:
    """A body of only the usual members (message, status, path) adds no upstream_detail."""
    result = _run(
        {
            "status": 409,
            "json": {
                "status": 409,
                "error": "Conflict",
                "message": "Order is paid",
                "path": "/o/7",
            },
        }
    )
    assert result is not None
    assert result.envelope.upstream_detail is None
    assert result.envelope.message == "Order is paid"


def test_a_bare_error_token_gets_its_companions() -> None:
    """``{"detail": {"error": "item_locked", ...}}`` (the form tests/frameworks recorded from
    FastAPI) says more than "item_locked": the other members join the message."""
    detail = {"error": "item_locked", "lock_holder": "job-7", "unlock_at": "in 5 minutes"}
    result = _run({"status": 409, "json": {"detail": detail}})
    assert result is not None
    assert result.envelope.message == "item_locked (lock_holder: job-7, unlock_at: in 5 minutes)"
    assert result.envelope.upstream_detail == detail


def test_a_sentence_with_only_the_status_keeps_no_detail() -> None:
    """Flask's JSON error handler ``{"code": 401, "name": ..., "description": ...}``: the
    description is the message; a code equal to the status and the name add nothing."""
    body = {"code": 401, "name": "Unauthorized", "description": "Bad credentials"}
    result = _run({"status": 401, "json": body})
    assert result is not None
    assert result.envelope.message == "Bad credentials"
    assert result.envelope.upstream_detail is None


def test_basic_challenge_is_not_told_to_get_a_token() -> None:
    """httpbin's empty 401 with ``WWW-Authenticate: Basic``: the hint covers a username and
    password, not only an access token."""
    result = _run(
        {"status": 401, "headers": {"www-authenticate": 'Basic realm="Fake Realm"'}, "body": ""},
        {"method": "GET", "path": "/basic-auth/u/p"},
    )
    assert result is not None
    assert result.envelope.rule == "fallback.401"
    assert "username and password" in result.envelope.hint


def test_empty_500_is_not_called_fatal() -> None:
    """A 500 with no body shows nothing permanent: severity error, no claim it fails again."""
    result = _run({"status": 500, "headers": {}, "body": ""}, {"method": "GET", "path": "/x"})
    assert result is not None
    assert result.envelope.severity.value == "error"
    assert "fails the same way" not in result.envelope.hint


def test_bare_422_does_not_point_at_a_message_that_says_nothing() -> None:
    """A 422 with an empty body: the hint sends the agent to the documented fields, not to
    'the message'; one with a message keeps pointing at it."""
    bare = _run({"status": 422, "headers": {}, "body": ""}, {"method": "POST", "path": "/o"})
    assert bare is not None
    assert "as the message says" not in bare.envelope.hint
    assert bare.envelope.hint.startswith("Check the fields, types and allowed values")
    said = _run(
        {
            "status": 422,
            "headers": {"content-type": "application/json"},
            "body": '{"message": "qty must be positive"}',
        },
        {"method": "POST", "path": "/o"},
    )
    assert said is not None
    assert said.envelope.message == "qty must be positive"
    assert "as the message says" in said.envelope.hint
