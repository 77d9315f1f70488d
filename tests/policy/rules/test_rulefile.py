"""Rule files are validated once, and every problem names its file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.config import yamlfile
from proxy.config.sources import load_settings
from proxy.config.yamlfile import RuleError
from proxy.policy.rules.rulefile import load_rule_text, load_rules
from proxy.policy.rules.rulespec import parse_status

GOOD = """\
pack: demo
rules:
  - id: demo.one
    when: {status: 404}
    envelope: {code: THING_MISSING, category: not_found}
"""


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        (
            "rules:\n  - id: a.b\n    when:\n      body: '(unclosed'\n"
            "    envelope: {code: X, category: internal}\n",
            4,
            "bad regex",
        ),
        (
            "rules:\n  - id: a.b\n    when:\n      json:\n        - {query: 'detail[['}\n"
            "    envelope: {code: X, category: internal}\n",
            5,
            "bad JMESPath",
        ),
        (
            "rules:\n  - id: a.b\n    envelope:\n      code: X\n      category: internal\n"
            "      message: '{{ x | exec }}'\n",
            6,
            "unknown filter",
        ),
        (
            "rules:\n  - id: a.b\n    envelope:\n"
            "      code: lower_case\n      category: internal\n",
            4,
            "SCREAMING_SNAKE",
        ),
        (
            "rules:\n  - id: a.b\n    envelope:\n      code: X\n      category: nonsense\n",
            5,
            "category",
        ),
        (
            "rules:\n  - id: a.b\n    when: {status: 7xx}\n"
            "    envelope: {code: X, category: internal}\n",
            3,
            "bad status",
        ),
        (
            "rules:\n  - id: a.b\n    colour: red\n    envelope: {code: X, category: internal}\n",
            3,
            "unknown key 'colour'",
        ),
        # an unclosed brace, quote or bracket: the line it opens on, not where it was noticed
        ("rules:\n  - id: a.b\n    envelope: {code: X\n", 3, "YAML syntax"),
        ("rules:\n  - id: 'a.b\n    envelope: {code: X}\n", 2, "from here to line 4"),
        ("rules:\n  - id: a.b\n    when:\n      status: 1\n     envelope: {}\n", 5, "YAML syntax"),
    ],
)
def test_errors_name_file_and_line(text: str, line: int, fragment: str) -> None:
    """Each kind of mistake is reported as ``file:line: ...`` at the offending line."""
    with pytest.raises(RuleError) as caught:
        load_rule_text(text, "bad.yaml", "bad")
    (problem, *_) = caught.value.problems
    assert problem.startswith(f"bad.yaml:{line}:"), problem
    assert fragment in problem


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "rules:\n  - id: a.b\n    envelope:\n      code: X\n      category: validation\n"
            "      fiel: /qty\n",
            "bad.yaml:6: unknown key 'fiel'; did you mean 'field'?",
        ),
        (
            "rules:\n  - id: a.b\n    when: {stauts: 422}\n"
            "    envelope: {code: X, category: internal}\n",
            "bad.yaml:3: unknown key 'stauts'; did you mean 'status'?",
        ),
        (
            "rules:\n  - id: a.b\n    envelope:\n      code: X\n      category: validation\n"
            "      invalid_fields: {each: errors, reasn: message}\n",
            "bad.yaml:6: unknown key 'reasn'; did you mean 'reason'?",
        ),
    ],
)
def test_a_misspelt_key_is_told_the_key_it_is_near(text: str, problem: str) -> None:
    """An unknown key in a rule file names the known key at its place it is nearest to."""
    with pytest.raises(RuleError) as caught:
        load_rule_text(text, "bad.yaml", "bad")
    assert problem in caught.value.problems


def test_a_misspelt_key_in_a_settings_file_is_told_the_key_it_is_near(tmp_path: Path) -> None:
    """The same in a config file, at the top and inside a route."""
    config = tmp_path / "cfg.yaml"
    config.write_text(
        "listen: 127.0.0.1:0\nrotues: []\nroutes:\n  - name: a\n"
        "    upstream: http://127.0.0.1:9\n    read_timout: 3\n"
    )
    with pytest.raises(RuleError) as caught:
        load_settings(config)
    assert set(caught.value.problems) == {
        f"{config}:2: unknown key 'rotues'; did you mean 'routes'?",
        f"{config}:6: unknown key 'read_timout'; did you mean 'read_timeout'?",
    }


def test_duplicate_ids_across_files_are_refused(tmp_path: Path) -> None:
    """The same rule id in two files is an error naming both places."""
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yaml").write_text(GOOD)
    with pytest.raises(RuleError, match=r"duplicate rule id 'demo\.one'"):
        load_rules([tmp_path])


def test_all_problems_of_all_files_are_reported_together(tmp_path: Path) -> None:
    """An operator fixes everything in one pass, not one error per run."""
    (tmp_path / "a.yaml").write_text(
        "rules:\n  - id: A!\n    envelope: {code: X, category: internal}\n"
    )
    (tmp_path / "b.yaml").write_text("rules: [1\n")
    with pytest.raises(RuleError) as caught:
        load_rules([tmp_path])
    assert len(caught.value.problems) == 2


def test_disabled_pack_is_skipped(tmp_path: Path) -> None:
    """A pack named in disabled_packs loads no rules."""
    (tmp_path / "a.yaml").write_text(GOOD)
    assert load_rules([tmp_path], disabled_packs=["demo"]) == []
    assert [r.spec.id for r in load_rules([tmp_path])] == ["demo.one"]


def test_missing_path_is_an_error(tmp_path: Path) -> None:
    """A rule path that does not exist is named, not ignored."""
    with pytest.raises(RuleError, match="no such rule file"):
        load_rules([tmp_path / "nope.yaml"])


@pytest.mark.parametrize(
    ("spec", "expected"),
    [(404, {404}), ("404", {404}), ("5xx", set(range(500, 600))), ("500-502", {500, 501, 502})],
)
def test_parse_status(spec: int | str, expected: set[int]) -> None:
    """Status specs name exactly the statuses they say."""
    assert parse_status(spec) == expected


def test_shipped_packs_load() -> None:
    """Every file in rules/ and the built-ins validate."""
    root = Path(__file__).resolve().parents[3]
    loaded = load_rules([root / "rules", root / "proxy" / "policy" / "rules" / "fallbacks.yaml"])
    assert any(r.spec.id == "fallback.5xx" for r in loaded)


def test_libyaml_reads_what_the_pure_python_loader_reads() -> None:
    """Every shipped YAML file gives the same data and lines through libyaml's parser as
    through the pure-Python one (issue 29: start-up); a document libyaml refuses is read again
    by the pure-Python loader, whose message is the one reported."""

    assert yamlfile._BoundedCLoader is not None  # PyYAML's wheels are built with libyaml
    root = Path(__file__).parents[3]
    files = [*root.glob("rules/**/*.yaml"), *root.glob("proxy/*.yaml")]
    assert len(files) > 30
    for file in files:
        text = file.read_text(encoding="utf-8")
        fast = yamlfile._read(yamlfile._BoundedCLoader(text))
        assert fast == yamlfile._read(yamlfile._BoundedLoader(text)), file
    with pytest.raises(RuleError) as caught:
        yamlfile.parse_yaml("a: [1, 2", "f.yaml")
    assert caught.value.problems == (
        "f.yaml:1: YAML syntax: expected ',' or ']', but got '<stream end>'"
        " (while parsing a flow sequence)",
    )
