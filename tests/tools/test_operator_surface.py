"""What an operator meets first: typo-proof rules, one-line start-up errors, a documented config
(issue 17 §4-5). ``mend`` runs as a subprocess, as an operator runs it."""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from proxy.config.route import Route
from proxy.config.settings import Settings
from proxy.config.yamlfile import RuleError
from proxy.observation.logs import make_logger
from proxy.policy.rules.rulecheck import undefined_variables
from proxy.policy.rules.ruleengine import Engine, RuleStore
from proxy.policy.rules.rulefile import load_rule_text, load_rules
from proxy.policy.rules.rulespec import RuleSpec
from proxy.runtime.admin import create_admin_app

ROOT = Path(__file__).resolve().parents[2]


def _mend(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _rule(**spec: Any) -> RuleSpec:
    return RuleSpec.model_validate(
        {"id": "t.r", "envelope": {"code": "X", "category": "internal"}} | spec
    )


def _with_message(message: str, **when: Any) -> RuleSpec:
    return _rule(when=when, envelope={"code": "X", "category": "internal", "message": message})


def test_a_template_typo_is_a_file_line_error_with_a_suggestion() -> None:
    """``{{ holdr }}`` where a capture defines ``holder``: the rule's line, and the near name."""
    text = (
        "rules:\n  - id: acme.locked\n    when:\n      body: 'by (?P<holder>\\w+)'\n"
        "    envelope:\n      code: LOCKED\n      category: conflict\n"
        "      message: 'Locked by {{ holdr }}.'\n"
    )
    with pytest.raises(RuleError) as caught:
        load_rule_text(text, "acme.yaml", "acme")
    (problem,) = caught.value.problems
    assert problem.startswith("acme.yaml:2: rule acme.locked: template variable {{ holdr }}")
    assert "did you mean {{ holder }}" in problem


@pytest.mark.parametrize(
    ("message", "when"),
    [
        ("{{ who }}", {"body": "(?P<who>\\w+)"}),
        ("{{ who }}", {"path_regex": "/users/(?P<who>\\d+)"}),
        ("{{ who }}", {"headers": {"X-User": "(?P<who>.+)"}}),
        ("{{ who }}", {"json": [{"query": "user", "matches": "(?P<who>.+)"}]}),
        ("{{ who }}", {"any": [{"not": {"body": "(?<who>x)"}}]}),
        ("{{ status }} {{ method }} {{ path }} {{ upstream_message }}", {}),
        ("{{ headers.retry-after }} {{ request_headers.x-user }}", {}),
    ],
)
def test_defined_variables_pass(message: str, when: dict[str, Any]) -> None:
    """Captures anywhere in the conditions, built-ins and header families define variables."""
    assert undefined_variables(_with_message(message, **when), "acme") == []


def test_vars_define_variables() -> None:
    """A ``vars`` entry defines its name for every template of the rule."""
    rule = _rule(
        vars={"who": "user.name"},
        envelope={"code": "X", "category": "internal", "hint": "Ask {{ who | upper }}."},
    )
    assert undefined_variables(rule, "acme") == []


def test_steps_and_invalid_fields_are_checked_too() -> None:
    """Templates in steps and in written-out invalid fields are read like the message."""
    rule = _rule(
        envelope={
            "code": "X",
            "category": "validation",
            "steps": ["Fix {{ feild }}."],
            "invalid_fields": [{"field": "/{{ name }}", "reason": "bad"}],
        }
    )
    problems = undefined_variables(rule, "acme")
    assert len(problems) == 2
    assert "{{ feild }}" in problems[0]
    assert "{{ name }}" in problems[1]


def test_limit_is_defined_only_for_mends_own_failures() -> None:
    """``{{ limit }}`` comes with mend's own failures (the proxy pack), not with upstream rules."""
    rule = _with_message("over {{ limit }} bytes")
    assert undefined_variables(rule, "proxy") == []
    assert undefined_variables(rule, "acme") != []


def test_retryable_in_a_rule_explains_action() -> None:
    """Setting ``retryable`` says it follows from ``action`` instead of "extra inputs"."""
    text = "rules:\n  - id: a.b\n    envelope: {code: X, category: internal, retryable: true}\n"
    with pytest.raises(RuleError) as caught:
        load_rule_text(text, "r.yaml", "r")
    assert "retryable is not set in a rule: it follows from action" in caught.value.problems[0]


def test_mend_check_fails_on_a_template_typo(tmp_path: Path) -> None:
    """``mend check`` exits 1 with the file:line of the rule whose template has a typo."""
    path = tmp_path / "typo.yaml"
    envelope = "{code: X, category: internal, message: '{{ statuss }}'}"
    path.write_text(f"rules:\n  - id: a.b\n    envelope: {envelope}\n")
    result = _mend("check", str(path))
    assert result.returncode == 1
    assert f"{path}:2: rule a.b: template variable {{{{ statuss }}}}" in result.stderr
    assert "did you mean {{ status }}" in result.stderr


_TWIN = (
    "rules:\n"
    "  - id: acme.locked\n    when: {status: 409, body: locked}\n"
    "    envelope: {code: LOCKED, category: conflict}\n"
    "  - id: acme.locked_again\n    when: {body: locked, status: 409}\n"
    "    envelope: {code: LOCKED_AGAIN, category: conflict}\n"
)


def test_a_rule_after_one_with_the_same_conditions_never_matches() -> None:
    """First match wins: a second rule of the file with the very same conditions (keys in
    another order) is dead, a ``file:line`` error naming the rule that wins."""
    with pytest.raises(RuleError) as caught:
        load_rule_text(_TWIN, "acme.yaml", "acme")
    (problem,) = caught.value.problems
    assert problem == (
        "acme.yaml:5: rule acme.locked_again can never match: rule acme.locked "
        "(acme.yaml:2) has the same conditions and comes first"
    )


def test_an_operator_file_may_override_a_shipped_rule_with_its_conditions(
    tmp_path: Path,
) -> None:
    """The same conditions in two files is the override mechanism (operator files first), not
    a dead rule."""
    first, second = _TWIN.split("  - id: acme.locked_again")
    (tmp_path / "a.yaml").write_text(first)
    (tmp_path / "b.yaml").write_text("rules:\n  - id: acme.locked_again" + second)
    assert [r.spec.id for r in load_rules([tmp_path])] == ["acme.locked", "acme.locked_again"]


@pytest.mark.parametrize(
    ("when", "reason"),
    [
        ("{protocol: graphql, tool: create_ticket}", "`tool` is only known on mcp calls"),
        ("{protocol: [http, graphql], rpc_method: tools/call}", "`rpc_method` is only known"),
    ],
)
def test_a_condition_its_protocol_never_has_is_a_dead_rule(when: str, reason: str) -> None:
    """A ``tool`` or ``rpc_method`` on a rule limited to protocols that never name one."""
    text = f"rules:\n  - id: a.b\n    when: {when}\n    envelope: {{code: X, category: internal}}\n"
    with pytest.raises(RuleError) as caught:
        load_rule_text(text, "a.yaml", "a")
    (problem,) = caught.value.problems
    assert problem.startswith("a.yaml:2: rule a.b can never match: " + reason)


def test_mend_check_fails_on_a_rule_that_never_matches(tmp_path: Path) -> None:
    """``mend check`` exits 1 on a dead rule and says which rule shadows it."""
    path = tmp_path / "twin.yaml"
    path.write_text(_TWIN)
    result = _mend("check", str(path))
    assert result.returncode == 1
    assert f"{path}:5: rule acme.locked_again can never match" in result.stderr


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "Traceback" not in result.stderr
    assert lines[0].startswith("mend: error: ")
    return lines[0]


def test_upstream_without_scheme_is_one_line_naming_the_flag() -> None:
    """``--upstream localhost:18101``: the flag and what is wrong, not a pydantic dump."""
    line = _one_error_line(_mend("run", "--upstream", "localhost:18101"))
    assert line.startswith("mend: error: --upstream: ")
    assert "http:// or https://" in line


def test_upstream_next_to_config_is_refused(tmp_path: Path) -> None:
    """``--upstream`` with ``--config`` was silently ignored: now one line saying why not."""
    config = tmp_path / "mend.yaml"
    config.write_text("routes:\n  - {name: a, upstream: 'http://127.0.0.1:9'}\n")
    line = _one_error_line(
        _mend("run", "--config", str(config), "--upstream", "http://127.0.0.1:8")
    )
    assert line.startswith("mend: error: --upstream: not with --config")


def test_run_without_upstream_is_one_line() -> None:
    """No --upstream and no --config: what to give."""
    line = _one_error_line(_mend("run"))
    assert "--upstream URL or --config FILE" in line


def test_unknown_config_key_is_one_line_with_file_and_line(tmp_path: Path) -> None:
    """A typo in a config key names the file and line."""
    config = tmp_path / "mend.yaml"
    config.write_text(
        "routes:\n  - name: a\n    upstream: http://127.0.0.1:9\n    read_timout: 5\n"
    )
    line = _one_error_line(_mend("run", "--config", str(config)))
    assert f"{config}:4:" in line
    assert "read_timout" in line


def test_unreadable_config_is_one_line(tmp_path: Path) -> None:
    """A config file that does not exist is one line naming it."""
    line = _one_error_line(_mend("run", "--config", str(tmp_path / "missing.yaml")))
    assert "missing.yaml" in line


def test_port_in_use_is_one_line() -> None:
    """A taken agent port: one line with the address, exit 2, no traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with socket.socket() as admin:
            admin.bind(("127.0.0.1", 0))
            admin_port = admin.getsockname()[1]
        line = _one_error_line(
            _mend(
                "run",
                "--upstream",
                "http://127.0.0.1:9",
                "--listen",
                f"127.0.0.1:{port}",
                "--admin-listen",
                f"127.0.0.1:{admin_port}",
            )
        )
    assert "cannot listen" in line
    assert str(port) in line


def test_config_schema_is_json_schema_of_every_key() -> None:
    """``mend config --schema`` prints a JSON Schema naming every settings and route key."""
    result = _mend("config", "--schema")
    assert result.returncode == 0
    schema = json.loads(result.stdout)
    assert set(Settings.model_fields) <= set(schema["properties"])
    route = schema["$defs"]["Route"]
    assert set(Route.model_fields) <= set(route["properties"])
    assert schema["additionalProperties"] is False


TOKEN = "s3cret-admin-token-0123"


@pytest.fixture
async def admin(aiohttp_client: Any) -> Any:
    """A real admin listener with a token, in front of the shipped rules."""
    registry = CollectorRegistry()
    settings = Settings(routes=(Route(name="a", upstream="http://127.0.0.1:9"),))
    store = RuleStore(settings, Engine.load(settings))
    return await aiohttp_client(
        create_admin_app(store, registry, make_logger(io.StringIO()), token=TOKEN)
    )


async def test_reload_needs_the_admin_token(admin: Any) -> None:
    """POST /-/reload without the bearer token is 401 with WWW-Authenticate; nothing reloads."""
    resp = await admin.post("/-/reload")
    assert resp.status == 401
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")


async def test_reload_with_a_wrong_token_is_refused(admin: Any) -> None:
    """A wrong token is refused like none."""
    resp = await admin.post("/-/reload", headers={"Authorization": "Bearer nope-nope-nope-nope"})
    assert resp.status == 401


async def test_reload_with_the_token_reloads(admin: Any) -> None:
    """The right token reloads."""
    resp = await admin.post("/-/reload", headers={"Authorization": f"Bearer {TOKEN}"})
    assert resp.status == 200
    assert (await resp.json())["status"] == "reloaded"


@pytest.mark.parametrize("path", ["/metrics", "/healthz", "/readyz"])
async def test_reads_stay_open(admin: Any, path: str) -> None:
    """Prometheus and the kubelet need no token."""
    assert (await admin.get(path)).status == 200


def test_admin_token_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """MEND_ADMIN_TOKEN sets admin_token when the config does not."""
    monkeypatch.setenv("MEND_ADMIN_TOKEN", TOKEN)
    settings = Settings(routes=(Route(name="a", upstream="http://127.0.0.1:9"),))
    assert settings.admin_token == TOKEN


def test_a_short_admin_token_is_refused() -> None:
    """An admin token under 16 characters is a config error, not a weak guard."""
    with pytest.raises(ValueError, match="admin_token"):
        Settings(routes=(Route(name="a", upstream="http://127.0.0.1:9"),), admin_token="short")
