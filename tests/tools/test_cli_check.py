"""``mend check``: rule validation as before, and ``--coverage DIR`` over recorded responses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.tools.cli import main

FASTAPI_422 = {"detail": [{"loc": ["body", "qty"], "msg": "too small", "input": -1}]}
SPRING_500 = {"timestamp": "t", "status": 500, "error": "Internal Server Error", "path": "/x"}


def recorded(directory: Path) -> Path:
    """A directory in every shape the convention allows."""
    directory.mkdir()
    (directory / "422-fastapi.json").write_text(json.dumps(FASTAPI_422))
    (directory / "500_spring.json").write_text(json.dumps(SPRING_500))
    (directory / "503-nginx.html").write_text("<html><title>503 Unavailable</title></html>")
    (directory / "teapot.txt").write_text("I'm a teapot")
    (directory / "teapot.txt.meta.yaml").write_text("status: 418\nrequest: {method: POST}\n")
    (directory / "orders.yaml").write_text(
        "request: {method: POST, path: /api/orders}\n"
        "response:\n  status: 422\n  json: " + json.dumps(FASTAPI_422) + "\n"
    )
    (directory / "ok.yaml").write_text("response: {status: 200, body: fine}\n")
    return directory


def test_check_still_validates_rule_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --coverage check keeps its behaviour: ok line, or file:line problems and exit 1."""
    good = tmp_path / "good.yaml"
    good.write_text("rules:\n  - id: a.b\n    envelope: {code: A, category: validation}\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - id: a.c\n    envelope: {code: lower, category: validation}\n")
    assert main(["check", str(good)]) == 0
    assert capsys.readouterr().out.startswith("ok: 60 rules: 1 in 1 file, 59 built in")
    assert main(["check", str(bad)]) == 1
    assert f"{bad}:3:" in capsys.readouterr().err


def test_coverage_counts_specific_rules_and_lists_fallback_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--coverage reports matches by rule and names every response only a fallback caught."""
    directory = recorded(tmp_path / "recorded")
    assert main(["check", "--coverage", str(directory)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert (
        "coverage: 6 responses: 3 matched specific rules, 2 only a fallback, 1 passed through"
        in out
    )
    by_rule = out[
        out.index("matched specific rules:") + 1 : out.index("matched specific rules:") + 3
    ]
    assert [line.split() for line in by_rule] == [
        ["fastapi.validation", "2"],
        ["spring.error", "1"],
    ]
    assert "  503-nginx.html  -> fallback.503 (SERVICE_UNAVAILABLE)" in out
    assert "  teapot.txt  -> fallback.4xx (CLIENT_ERROR)" in out
    assert "  ok.yaml" in out


def test_coverage_lists_deliberate_fallbacks_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A response whose meta says ``deliberate: REASON`` is listed with its reason, not among
    the ones to write a rule for; one matched by a specific rule ignores the note."""
    directory = recorded(tmp_path / "recorded")
    (directory / "503-nginx.html.meta.yaml").write_text("deliberate: nginx says nothing more\n")
    (directory / "locked.yaml").write_text(
        "deliberate: an application code fallback.409 keeps as upstream_detail\n"
        "response: {status: 409, json: {detail: {code: item_locked, lock_holder: ana}}}\n"
    )
    assert main(["check", "--coverage", str(directory)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert (
        "coverage: 7 responses: 3 matched specific rules, 1 only a fallback, 2 left to a "
        "fallback on purpose, 1 passed through" in out
    )
    assert out.index("left to a fallback on purpose (deliberate:):") > out.index(
        "  teapot.txt  -> fallback.4xx (CLIENT_ERROR)"
    )
    assert "  503-nginx.html  -> fallback.503 (SERVICE_UNAVAILABLE): nginx says nothing more" in out
    assert "  503-nginx.html  -> fallback.503 (SERVICE_UNAVAILABLE)" not in out


def test_coverage_uses_the_extra_rule_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rule file given to check takes part: the nginx page stops being fallback-only."""
    directory = recorded(tmp_path / "recorded")
    nginx = tmp_path / "nginx.yaml"
    nginx.write_text(
        "rules:\n  - id: nginx.unavailable\n    when: {status: 503, content_type: text/html}\n"
        "    envelope: {code: SERVICE_UNAVAILABLE, category: unavailable}\n"
    )
    assert main(["check", str(nginx), "--coverage", str(directory)]) == 0
    out = capsys.readouterr().out
    assert "4 matched specific rules, 1 only a fallback" in out
    assert "nginx.unavailable" in out


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("nginx.html", "<html></html>", "no status: name the file like 503-nginx.html"),
        ("bad.yaml", "response: {status: 500, json: {}, body: x}\n", "not both"),
        ("x.txt", "x", "status"),
    ],
)
def test_unreadable_recordings_are_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str, problem: str
) -> None:
    """A recording whose status cannot be told, or a malformed one, is reported and fails."""
    directory = tmp_path / "rec"
    directory.mkdir()
    (directory / name).write_text(text)
    if name == "x.txt":
        (directory / "x.txt.meta.yaml").write_text("status: 9000\n")
    assert main(["check", "--coverage", str(directory)]) == 1
    out = capsys.readouterr().out
    assert problem in out


def test_coverage_with_a_config_uses_its_route(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --config the route's rules answer: its own teapot rule covers the 418."""
    (tmp_path / "teapot.yaml").write_text(
        "rules:\n  - id: mine.teapot\n    when: {status: 418}\n"
        "    envelope: {code: TEAPOT, category: validation}\n"
    )
    (tmp_path / "mend.yaml").write_text(
        "routes:\n  - {name: api, upstream: 'http://127.0.0.1:9', rules: [teapot.yaml]}\n"
    )
    directory = tmp_path / "rec"
    directory.mkdir()
    (directory / "418-pot.txt").write_text("short and stout")
    args = ["check", "--config", str(tmp_path / "mend.yaml"), "--coverage", str(directory)]
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert (
        "coverage: 1 response: 1 matched specific rule, 0 only a fallback, 0 passed through" in out
    )
    assert [line.split() for line in out if "mine.teapot" in line] == [["mine.teapot", "1"]]
