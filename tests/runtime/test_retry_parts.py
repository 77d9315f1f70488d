"""The retry policy's parts on their own: its settings, the budget, what a failure is called.

The policy end to end, with real upstreams, is in ``test_retries.py`` and ``test_retry_budget.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.config.retries import BackOff, Retries, RetryBudget
from proxy.config.sources import load_settings
from proxy.config.yamlfile import RuleError
from proxy.edge.failures import (
    UpstreamProtocolError,
    UpstreamTimeout,
    UpstreamTLSError,
    UpstreamUnreachable,
)
from proxy.edge.upstream.errors import Disconnected
from proxy.runtime.retries import Budget, _outcome, back_off_s


def _settings(tmp_path: Path, retries: str) -> Path:
    config = tmp_path / "mend.yaml"
    config.write_text(
        "routes:\n  - name: api\n    upstream: http://127.0.0.1:9\n" + retries, encoding="utf-8"
    )
    return config


def test_defaults_retry_what_was_not_processed_once() -> None:
    """On by default: two tries on a failed connection, a reset, 503 and 429 (docs/retries.md)."""
    policy = Retries()
    assert policy.enabled
    assert policy.attempts == 2
    assert policy.statuses() == {503, 429}
    assert Retries(attempts=1).enabled is False


def test_gateway_error_names_502_503_and_504() -> None:
    """``gateway-error`` is Envoy's: every gateway status."""
    assert Retries(retry_on=("gateway-error",)).statuses() == {502, 503, 504}


def test_a_route_s_policy_replaces_the_top_level_one(tmp_path: Path) -> None:
    """A route's ``retries:`` is whole: nothing of the top level's is merged into it."""
    config = _settings(tmp_path, "    retries: {attempts: 1}\nretries: {attempts: 4}\n")
    settings = load_settings(config)
    assert settings.retries.attempts == 4
    assert settings.routes[0].retries == Retries(attempts=1)


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ("connect-failures", "did you mean 'connect-failure'?"),
        ("200", "is not a 4xx or 5xx status"),
        ("true", "is not an outcome or a status"),
    ],
)
def test_a_wrong_retry_on_entry_is_named_with_its_line(
    tmp_path: Path, entry: str, said: str
) -> None:
    """A misspelt outcome or a status that is no error fails the load, naming file and line."""
    config = _settings(tmp_path, f"retries:\n  retry_on: [{entry}]\n")
    with pytest.raises(RuleError) as raised:
        load_settings(config)
    assert f"{config}:5:" in str(raised.value)
    assert said in str(raised.value)


def test_the_budget_allows_its_minimum_however_few_requests() -> None:
    """With three requests in flight, three retries may be, not 20 % of three."""
    budget, rules = Budget(), RetryBudget(percent=20, min_concurrent=3)
    for _ in range(3):
        budget.enter("api")
    assert [budget.take("api", rules) for _ in range(4)] == [True, True, True, False]


def test_the_budget_is_a_share_of_the_requests_in_flight() -> None:
    """With 50 requests in flight, 20 % may be retries at once; a retry ended frees a place."""
    budget, rules = Budget(), RetryBudget(percent=20, min_concurrent=3)
    for _ in range(50):
        budget.enter("api")
    taken = [budget.take("api", rules) for _ in range(12)]
    assert taken.count(True) == 10
    budget.give("api")
    assert budget.take("api", rules) is True


def test_the_budget_forgets_a_route_with_nothing_in_flight() -> None:
    """Its tables hold only the routes with requests in flight."""
    budget = Budget()
    budget.enter("api")
    assert budget.take("api", RetryBudget())
    budget.give("api")
    budget.leave("api")
    assert budget.requests == {}
    assert budget.retries == {}


def test_each_failure_is_called_what_retry_on_names() -> None:
    """Refused or no connection in time: connect-failure; lost after sending: reset; no head in
    time: timeout; a TLS failure or garbage back: nothing a policy retries."""
    reset = UpstreamProtocolError("closed")
    reset.__cause__ = Disconnected("closed before the response head")
    connect_timeout = UpstreamTimeout("connect")
    connect_timeout.applied = "no"
    assert _outcome(UpstreamUnreachable("refused")) == "connect-failure"
    assert _outcome(connect_timeout) == "connect-failure"
    assert _outcome(UpstreamTimeout("read")) == "timeout"
    assert _outcome(reset) == "reset"
    assert _outcome(UpstreamProtocolError("bad status line")) is None
    assert _outcome(UpstreamTLSError("expired")) is None


@pytest.mark.parametrize(
    ("retry", "ceiling_ms"), [(0, 25), (1, 50), (2, 100), (3, 200), (4, 250), (9, 250)]
)
def test_back_off_doubles_up_to_its_maximum(retry: int, ceiling_ms: int) -> None:
    """Envoy's defaults: 25 ms, doubling, never over 250 ms; the jitter draws under it."""
    back_off = BackOff()
    assert back_off_s(back_off, retry, 0.0) == 0.0
    assert back_off_s(back_off, retry, 0.5) == pytest.approx(ceiling_ms / 2000)
    assert back_off_s(back_off, retry, 0.999999) < ceiling_ms / 1000
