"""The operator's rough edges of the command line (issue 39): help texts that agree with what
the commands do, one rule count, ``mend config`` that shows the effective configuration."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from proxy.tools.cli import main

ROOT = Path(__file__).resolve().parents[2]
CALL = '{"jsonrpc": "2.0", "id": 12, "method": "get_order"}'
BAD_GATEWAY = "<html><title>502 Bad Gateway</title></html>"
ONE_RULE = """rules:
  - id: acme.locked
    when: {status: 423}
    envelope: {code: LOCKED, category: conflict}
"""


def _mend(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def test_explain_help_does_not_call_status_required_without_saying_when() -> None:
    """``--status`` is optional in the usage (``--redact`` needs none): its help says so."""
    result = _mend("explain", "--help")
    status = next(line for line in result.stdout.splitlines() if "--status STATUS " in line)
    assert "[--status STATUS]" in result.stdout
    assert "unless --redact" in status


def test_explain_without_protocol_detects_it_as_mend_run_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No ``--protocol``: auto, as ``mend run``'s route default, so a JSON-RPC call is answered
    in JSON-RPC (the old default, http, answered with the bare envelope)."""
    code = main(
        [
            "explain",
            *("--status", "502", "--body", BAD_GATEWAY),
            *("--method", "POST", "--path", "/rpc", "--request-body", CALL, "--json"),
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["protocol"] == "jsonrpc"


def test_explain_protocol_help_names_auto_the_default() -> None:
    """``explain --protocol``'s help gives the default ``mend run`` has, auto, not http."""
    help_text = " ".join(_mend("explain", "--help").stdout.split())
    assert "(default http)" not in help_text
    assert "auto unless --config sets one" in help_text


def test_check_counts_rules_as_run_and_readyz_do() -> None:
    """``mend check``'s count is the engine's (``/readyz``'s and the ``started`` line's): the
    files' rules and the built-in ones, with how many of each."""
    from proxy.policy.rules.ruleengine import Engine  # noqa: PLC0415
    from proxy.tools.ruletest.engines import engine_settings  # noqa: PLC0415

    loaded = Engine.load(engine_settings([], default_packs=True)).rule_count
    line = _mend("check").stdout.strip()
    assert line.startswith(f"ok: {loaded} rules: "), line
    assert "built in" in line


def test_one_rule_is_one_rule_not_one_rules(tmp_path: Path) -> None:
    """A file with one rule is ``1 file``, and the count of its own rules reads ``1 in 1 file``."""
    (tmp_path / "acme.yaml").write_text(ONE_RULE)
    line = _mend("check", str(tmp_path / "acme.yaml")).stdout
    assert ": 1 in 1 file, " in line
    assert "1 files" not in line


def test_config_alone_prints_its_help() -> None:
    """``mend config`` with no flag says what it does and lists --show and --schema, exit 0."""
    result = _mend("config")
    assert result.returncode == 0, result.stderr
    assert "--show" in result.stdout
    assert "--schema" in result.stdout
    assert "give --schema" not in result.stderr


def test_config_show_prints_the_effective_settings_as_yaml() -> None:
    """``--show`` with run's flags: YAML of every setting, defaults and the flags' values."""
    result = _mend("config", "--show", "--upstream", "http://127.0.0.1:9", "--log-level", "warning")
    assert result.returncode == 0, result.stderr
    shown = yaml.safe_load(result.stdout)
    assert shown["log_level"] == "warning"
    assert shown["routes"][0]["upstream"] == "http://127.0.0.1:9"
    assert shown["listen"] == "127.0.0.1:8080"  # a default, shown too


def test_config_show_masks_secrets(tmp_path: Path) -> None:
    """Tokens, the session key, OTLP headers and URL passwords are shown as ``***``."""
    config = tmp_path / "mend.yaml"
    config.write_text(
        "admin_token: admin-token-0123456789\n"
        "session: {secret: session-secret-0123456789}\n"
        "state: redis://:redispass@127.0.0.1:6379/0\n"
        "tracing: {headers: {x-api-key: vendor-key-0123}}\n"
        "routes: [{name: a, upstream: 'http://bob:hunter2@127.0.0.1:9'}]\n"
    )
    result = _mend("config", "--show", "--config", str(config))
    assert result.returncode == 0, result.stderr
    for secret in ("admin-token", "session-secret", "redispass", "vendor-key", "hunter2"):
        assert secret not in result.stdout
    shown = yaml.safe_load(result.stdout)
    assert shown["admin_token"] == "***"
    assert shown["session"]["secret"] == "***"
    assert shown["tracing"]["headers"] == {"x-api-key": "***"}
    assert shown["routes"][0]["upstream"] == "http://***@127.0.0.1:9"


def test_config_show_refuses_what_run_refuses() -> None:
    """A flag ``mend run`` would refuse is the same one-line error, exit 2."""
    result = _mend("config", "--show", "--upstream", "localhost:1")
    assert result.returncode == 2
    assert result.stderr.startswith("mend: error: --upstream: ")
