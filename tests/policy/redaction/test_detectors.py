"""Redaction as declared detectors: the shipped files, their tables, the loader, the functions.

Every shipped detector carries a table (``catches``: texts it must act on, ``keeps``: near misses
it must leave), checked here against the detector alone. The loader reports a bad file with
``file:line`` and a reload never replaces a working set with a broken one. The functions a
detector references by ``check:`` are tested on their own.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.config.route import Route
from proxy.config.settings import Settings
from proxy.config.yamlfile import RuleError
from proxy.policy.redaction import functions
from proxy.policy.redaction.detectors import (
    ACTIONS,
    KINDS,
    LINE_START,
    LoadedDetector,
    load_detector_text,
)
from proxy.policy.redaction.effects import acts_on, as_json, as_text, explain_text
from proxy.policy.redaction.engine import Redactor
from proxy.policy.redaction.sets import build_set, default_set, load_shipped
from proxy.policy.redaction.table import TABLE_END, TABLE_START, render_table
from proxy.policy.rules.ruleengine import Engine, RuleStore

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = load_shipped()
SET = default_set()
CORPUS = sorted(p for p in (ROOT / "tests" / "corpus").rglob("*") if p.is_file())


def _ids(detectors: list[LoadedDetector]) -> list[str]:
    return [d.name for d in detectors]


# --- the shipped set ----------------------------------------------------------------------------


def test_the_shipped_files_hold_one_family_each() -> None:
    """Secrets, debug pages, exceptions, stack traces per language, SQL, hosts, paths, banners."""
    families = {d.family for d in SHIPPED}
    assert {"secrets", "debug_pages", "exceptions", "sql", "hosts", "paths", "banners"} <= families
    assert len([f for f in families if f.startswith("traces_")]) >= 8
    assert len(SHIPPED) == len({d.name for d in SHIPPED}) >= 90
    assert {d.spec.kind for d in SHIPPED} <= set(KINDS)
    assert {d.spec.action for d in SHIPPED} == set(ACTIONS)


@pytest.mark.parametrize("detector", SHIPPED, ids=_ids(SHIPPED))
def test_every_shipped_detector_has_a_table(detector: LoadedDetector) -> None:
    """Texts it must catch and near misses it must keep, and a description of what it is."""
    assert detector.spec.catches, detector.source
    assert detector.spec.keeps, detector.source
    assert detector.spec.description, detector.source


CATCHES = [(d, text) for d in SHIPPED for text in d.spec.catches]
KEEPS = [(d, text) for d in SHIPPED for text in d.spec.keeps]


@pytest.mark.parametrize(("detector", "text"), CATCHES, ids=[d.name for d, _ in CATCHES])
def test_a_detector_acts_on_what_it_must_catch(detector: LoadedDetector, text: str) -> None:
    assert acts_on(detector, text, SET.context), (detector.source, text)


@pytest.mark.parametrize(("detector", "text"), KEEPS, ids=[d.name for d, _ in KEEPS])
def test_a_detector_leaves_its_near_misses(detector: LoadedDetector, text: str) -> None:
    assert not acts_on(detector, text, SET.context), (detector.source, text)


@pytest.mark.parametrize(
    ("detector", "text"),
    [(d, t) for d, t in CATCHES if d.spec.action in ("mask", "replace", "cut")],
    ids=[d.name for d, _ in CATCHES if d.spec.action in ("mask", "replace", "cut")],
)
def test_plain_prose_never_skips_what_a_detector_catches(
    detector: LoadedDetector, text: str
) -> None:
    """Plain prose skips the full pass: every catch must either not look plain, or hold one of the
    ``prose`` words, or be found by an ``in_prose`` detector."""
    assert not Redactor()._is_plain(text), (detector.source, text)


def _texts() -> list[str]:
    texts = [p.read_text("utf-8", errors="replace") for p in CORPUS]
    texts += [t for d in SHIPPED for t in (*d.spec.catches, *d.spec.keeps)]
    return texts


@pytest.mark.parametrize(
    "detector",
    [d for d in SHIPPED if d.spec.triggers and d.spec.action != "page"],
    ids=_ids([d for d in SHIPPED if d.spec.triggers and d.spec.action != "page"]),
)
def test_triggers_are_in_every_text_the_pattern_matches(detector: LoadedDetector) -> None:
    """A trigger only skips a pattern that cannot match: every match lies in a text holding one."""
    spec = detector.spec
    pattern = re.compile(spec.pattern or "") if spec.engine == "re" else None
    assert pattern is not None
    for text in _texts():
        for line in [text, *text.splitlines()]:
            subject = functions.ascii_lower(line) if spec.lowered else line
            if pattern.search(subject):
                cut = spec.action == "cut"
                lowered = functions.ascii_lower(line) if cut else line.lower()
                assert any(t in lowered for t in spec.triggers), (detector.source, line[:200])


def test_the_set_runs_in_file_order_with_joined_patterns() -> None:
    """Masks run in the order of 10-secrets.yaml; adjacent token formats run as one pattern, and
    every stack frame of every language is one pattern a line is matched against once."""
    masks = [d.name for d in SHIPPED if d.spec.action == "mask"]
    assert masks[0] == "private_key"
    assert masks[-1] == "random_token"
    joined = [u for u in SET.masks if len(u.members) > 1]
    assert {u.kind for u in joined} == {"cloud_key", "secret"}
    assert len(SET.frames) == 1
    assert len(SET.frames[0].members) == len([d for d in SHIPPED if d.spec.action == "frame"])
    assert SET.named("private_key") is not None
    assert [u.first.name for u in SET.blocks] == ["private_key"]


# --- the functions detectors reference ---------------------------------------------------------


def test_entropy_and_random_tokens() -> None:
    assert functions.entropy("aaaa") == 0
    assert functions.entropy("abcd") == 2
    assert functions.looks_random("8f3kQ9zX2mW7vB4nR1tY6uP0aS5dF3gH")
    assert not functions.looks_random("ThisIsAVeryLongClassNameWithoutDigits")
    assert not functions.looks_random("ch_3MmlLrLkdIwHu7ix0snN0B15")  # a Stripe charge id
    allowed = functions.Context(allow=(re.compile(r"ORD-[A-Za-z0-9]{28}"),))
    order = "ORD-8f3kQ9zX2mW7vB4nR1tY6uP0aS5d"
    assert functions.looks_random(order)
    assert not functions.looks_random(order, allowed)
    assert functions.public_id(order, allowed)


@pytest.mark.parametrize(
    ("value", "secret"),
    [("hunter22", True), ("'p4ss'", True), ("must", False), ("[redacted]", False), ("1234", False)],
)
def test_secret_value(value: str, secret: bool) -> None:
    assert functions.secret_value(value) is secret


@pytest.mark.parametrize(
    ("candidate", "kind"),
    [
        ("10.0.3.7", "private_address"),
        ("100.64.1.1", "private_address"),
        ("fe80::1%eth0", "private_address"),
        ("::1", "private_address"),
        ("8.8.8.8", "ip_address"),
        ("999.1.1.1", None),
        ("1.2.3", None),
    ],
)
def test_ip_classification(candidate: str, kind: str | None) -> None:
    assert functions.ip_kind(candidate) == kind


@pytest.mark.parametrize(
    ("path", "internal"),
    [
        ("/srv/app/config.yml", True),
        ("~/deploy/.env", True),
        ("/api/orders/node_modules/x", True),
        ("/x.py", True),
        ("/api/v1/users/17", False),
        ("/data/attributes/email", False),
        ("/qty", False),
    ],
)
def test_internal_paths(path: str, internal: bool) -> None:
    assert functions.is_internal_path(path) is internal


def test_service_labels_dns_names_and_exception_names() -> None:
    assert functions.SERVICE_LABEL.search("orders-db")
    assert not functions.SERVICE_LABEL.search("Note")
    assert functions.programming_error("KeyError: ")
    assert not functions.programming_error("ValueError: ")
    assert functions.names_programming_error({"error": "builtins.KeyError", "message": "'x'"})
    assert not functions.names_programming_error({"error": "not_found"})
    line = "raised a TimeoutError here"
    match = re.search(functions.EXC_SUFFIX, line)
    assert match is not None
    assert functions.exception_class(line, match) == line.index("TimeoutError")
    bare = re.search(functions.EXC_SUFFIX, "Error: x")
    assert bare is not None
    assert functions.exception_class("Error: x", bare) is None


def test_module_references_and_debug_pages() -> None:
    called = "x = app.views.render(request)"
    match = re.search(r"app\.views\.render", called)
    assert match is not None
    assert functions.module_reference(called, match) == called.index("app")
    field = "Unknown field orders.items.qty"
    match = re.search(r"orders\.items\.qty", field)
    assert match is not None
    assert functions.module_reference(field, match) is None
    assert functions.is_debug_page("django version: 4", False, ("django version:",), ()) == (
        "django version:"
    )
    assert functions.is_debug_page("root cause", False, (), ("root cause",)) is None
    assert functions.is_debug_page("root cause", True, (), ("root cause",)) == "root cause"


# --- the loader ----------------------------------------------------------------------------------

_GOOD = """\
family: acme
detectors:
  - name: acme_token
    kind: secret
    action: mask
    description: ACME live tokens
    pattern: 'acme_live_[A-Za-z0-9]{16,}'
    catches: [acme_live_0123456789abcdef]
    keeps: [acme_live_short]
"""


def _problems(text: str, *, shipped: bool = False) -> list[str]:
    with pytest.raises(RuleError) as info:
        load_detector_text(text, "acme.yaml", shipped=shipped)
    return list(info.value.problems)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (_GOOD.replace("{16,}", "{16,}("), "acme.yaml:3: detectors.0: bad regex"),
        (_GOOD.replace("kind: secret", "kind: password"), "acme.yaml:4: detectors.0.kind: kind"),
        (_GOOD + "    check: entropy\n", "check 'entropy' for mask: known are random_token"),
        (
            _GOOD.replace("action: mask", "action: hide"),
            "acme.yaml:5: detectors.0.action: Input should be",
        ),
        (_GOOD + "    engine: re\n    gate: auto\n", "acme.yaml:3: engine: re is for mend's own"),
        (_GOOD + "    group: 2\n", "group 2: the pattern has 0 groups"),
        (_GOOD + "    triggers: [ACME]\n", "lowercase"),
        (_GOOD + "    after: nowhere\n", "after: no mask detector named 'nowhere'"),
        (_GOOD.replace("acme_live_[A-Za-z0-9]{16,}", "a*"), "matches the empty string"),
        (_GOOD.replace("acme_live_[A-Za-z0-9]{16,}", "${nope}"), "unknown variable ${nope}"),
        (_GOOD + "    colour: red\n", "acme.yaml:10: unknown key 'colour'"),
        (_GOOD + _GOOD.split("detectors:\n")[1], "duplicate detector name 'acme_token'"),
        ("- just a list\n", "acme.yaml:1: a detector file is a mapping"),
        ("detectors: [\n", "acme.yaml:2: YAML syntax"),
    ],
)
def test_a_bad_detector_file_is_refused_with_file_and_line(text: str, problem: str) -> None:
    if "after:" in text or "duplicate" in problem:
        with pytest.raises(RuleError) as info:
            build_set([*SHIPPED, *load_detector_text(text, "acme.yaml", shipped=False)])
        problems = list(info.value.problems)
    else:
        problems = _problems(text)
    assert any(problem in p for p in problems), problems


def test_engine_re_needs_a_gate_unless_it_matches_at_a_line_start() -> None:
    text = _GOOD.replace("    pattern:", "    engine: re\n    pattern:")
    assert any("needs an RE2 gate" in p for p in _problems(text, shipped=True))
    assert load_detector_text(text + "    gate: auto\n", "acme.yaml", shipped=True)
    assert load_detector_text(text + "    triggers: [acme_]\n", "acme.yaml", shipped=True)
    frame = text.replace("action: mask", "action: frame").replace(
        "kind: secret", "kind: stack_trace"
    )
    assert load_detector_text(frame, "acme.yaml", shipped=True)
    assert {"frame", "chain", "prefix"} == LINE_START


# --- operator detector files and hot reload ------------------------------------------------------


def _settings(detectors: Path) -> Settings:
    route = Route(name="default", upstream="http://127.0.0.1:9")
    return Settings.model_validate(
        {"routes": [route.model_dump()], "redaction": {"detectors": [str(detectors)]}}
    )


def test_an_operator_detector_file_runs_and_a_bad_one_never_replaces_it(tmp_path: Path) -> None:
    """A reload with a broken detector file fails with file:line and the running set stays."""
    (tmp_path / "acme.yaml").write_text(_GOOD, encoding="utf-8")
    store = RuleStore(_settings(tmp_path), Engine.load(_settings(tmp_path)))
    text = "charge failed: acme_live_0123456789abcdef"
    assert "acme_live" not in store.engine.redactor_for("default").mask(text).text
    (tmp_path / "acme.yaml").write_text(_GOOD.replace("{16,}", "{16,}("), encoding="utf-8")
    with pytest.raises(RuleError) as info:
        store.reload()
    assert any(f"{tmp_path / 'acme.yaml'}:3:" in p for p in info.value.problems)
    assert "acme_live" not in store.engine.redactor_for("default").mask(text).text
    assert store.last_error is not None
    (tmp_path / "acme.yaml").write_text(_GOOD.replace("acme_live_", "acme_test_"), "utf-8")
    store.reload()
    assert "acme_live_0123" in store.engine.redactor_for("default").mask(text).text


def test_a_shipped_file_that_breaks_fails_the_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "redaction"
    broken.mkdir()
    (broken / "10-x.yaml").write_text(_GOOD.replace("kind: secret", "kind: nope"), "utf-8")
    monkeypatch.setattr("proxy.policy.redaction.sets.shipped_directory", lambda: broken)
    with pytest.raises(RuleError) as info:
        Engine.load(_settings(tmp_path))
    assert any(f"{broken / '10-x.yaml'}:4: detectors.0.kind" in p for p in info.value.problems)


# --- explanations --------------------------------------------------------------------------------


def test_an_explanation_names_the_detector_of_every_span() -> None:
    text = (
        "Charge failed: connect to ledger-7.prod.internal:8443 refused, "
        "password=hunter22\n\tat com.acme.Ledger.post(Ledger.java:42)"
    )
    explained = explain_text(text, SET)
    acts = {(a.where, a.detector) for a in explained.acts}
    assert ("agent", "call_frame") in acts
    assert ("agent", "internal_domain") in acts
    assert ("agent", "key_value_secret") in acts
    assert ("log", "key_value_secret") in acts
    assert "ledger-7" not in explained.agent.text
    assert "ledger-7" in explained.log.text
    shown = as_text(explained)
    assert "internal_domain (internal_host, replace, " in shown
    assert "60-hosts.yaml:" in shown
    document: dict[str, Any] = as_json(explained)
    assert document["agent"]["text"] == explained.agent.text
    assert {a["detector"] for a in document["acts"]} >= {"call_frame", "key_value_secret"}


# --- the table in docs/design.md ----------------------------------------------------------------


def test_design_md_shows_the_detector_set_generated_from_the_files() -> None:
    """Regenerate with ``python -m proxy.policy.redaction.table --write``."""
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    start = design.index(TABLE_START) + len(TABLE_START)
    assert design[start : design.index(TABLE_END)].strip() == render_table(SHIPPED).strip()


def test_the_shipped_files_parse_as_plain_yaml_too() -> None:
    """Every file is ordinary YAML (editors, linters): one mapping with a detectors list."""
    for path in sorted((ROOT / "rules" / "redaction").glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert isinstance(data["detectors"], list), path


def test_no_class_or_function_of_the_redaction_code_is_long() -> None:
    """The engine stays a small engine: every class and function under 150 lines."""
    import ast  # noqa: PLC0415

    for path in sorted((ROOT / "proxy" / "policy" / "redaction").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef | ast.FunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                assert length <= 150, f"{path.name}: {node.name} has {length} lines"
