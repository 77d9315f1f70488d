"""The shipped rule packs: every case in rules/tests/*.yaml, and the recorded-response corpus.

Each case is evaluated exactly as the proxy would (``proxy.policy.evaluate``) against the engine
built from
all default packs plus the built-in fallbacks, on a route whose ``success_rules`` the case names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.config.settings import PACKAGED_RULES
from proxy.policy.envelope.model import Envelope, InvalidField
from proxy.policy.evaluate import Evaluation
from proxy.policy.rules.rulefile import load_rules
from proxy.tools.ruletest.cases import Case, LoadedCase
from proxy.tools.ruletest.engines import Engines, replay
from proxy.tools.ruletest.runner import run_case

ROOT = Path(__file__).resolve().parents[3]
CASES = sorted((ROOT / "rules" / "tests").glob("*.yaml"))
CORPUS = ROOT / "tests" / "corpus" / "responses"


ENGINES = Engines()


def _run(
    response: dict[str, Any],
    request: dict[str, Any] | None = None,
    success_rules: tuple[str, ...] = (),
    protocol: str = "http",
) -> Evaluation | None:
    return replay(ENGINES, response, request, success_rules, protocol)


def _cases() -> list[Any]:
    out = []
    for file in CASES:
        for case in yaml.safe_load(file.read_text(encoding="utf-8"))["cases"]:
            out.append(pytest.param(file, case, id=f"{file.stem}: {case['name']}"))
    return out


def test_packs_load() -> None:
    """Every shipped pack validates, and every pack names itself."""
    rules = load_rules([PACKAGED_RULES])
    assert rules
    assert all(not r.pack[:1].isdigit() for r in rules)


def test_every_pack_has_cases() -> None:
    """Each pack file has a test file with at least three cases, one of them a near miss."""
    for pack in sorted(PACKAGED_RULES.glob("*.yaml")):
        cases = yaml.safe_load((PACKAGED_RULES / "tests" / pack.name).read_text())["cases"]
        assert len(cases) >= 3, pack.name
        rules = {r.spec.id for r in load_rules([pack])}
        hit = {c["expect"].get("rule") for c in cases if isinstance(c["expect"], dict)}
        assert any(
            c["expect"] == "passthrough" or c["expect"].get("rule") not in rules for c in cases
        ), f"{pack.name}: no near-miss case"
        assert hit & rules, f"{pack.name}: no case hits the pack"


@pytest.mark.parametrize(("file", "case"), _cases())
def test_case(file: Path, case: dict[str, Any]) -> None:
    """A pack test case: the envelope holds every expected value, or the response passes through
    (in the case's protocol, the answer the agent gets holds what ``expect_response`` says)."""
    loaded = LoadedCase(Case.model_validate(case), file, 1)
    outcome = run_case(loaded, ENGINES)
    assert outcome.passed, "\n".join(outcome.problems)


def _corpus() -> list[Any]:
    manifest = yaml.safe_load((CORPUS / "manifest.yaml").read_text(encoding="utf-8"))
    return [pytest.param(entry, id=entry["file"]) for entry in manifest["responses"]]


@pytest.mark.parametrize("entry", _corpus())
def test_corpus(entry: dict[str, Any]) -> None:
    """A recorded real-world response gets the right category, retryability and fields."""
    body = (CORPUS / entry["file"]).read_bytes().decode("utf-8", errors="replace")
    response = {"status": entry["status"], "headers": entry.get("headers") or {}, "body": body}
    result = _run(
        response,
        entry.get("request"),
        tuple(entry.get("success_rules") or ()),
        entry.get("protocol", "http"),
    )
    expect = entry["expect"]
    if expect == "passthrough":
        assert result is None, f"rewritten by {result.match.rule.id if result else ''}"
        return
    assert result is not None, "passed through"
    env = result.envelope
    got = {"category": env.category.value, "retryable": env.retryable, "rule": env.rule}
    assert (got["category"], got["retryable"]) == (expect["category"], expect["retryable"]), got
    if "fields" in expect:
        assert [f.field for f in env.invalid_fields] == expect["fields"], env.invalid_fields
    if "retry_after_ms" in expect:
        assert env.retry_after_ms == expect["retry_after_ms"]
    if "severity" in expect:
        assert env.severity.value == expect["severity"]


def _same_as_validated(envelope: Envelope) -> None:
    """``envelope`` (made without validation) equals pydantic's validation of its own fields."""
    fields = [InvalidField.model_validate(f.__dict__) for f in envelope.invalid_fields]
    assert fields == list(envelope.invalid_fields)
    validated = Envelope.model_validate({**envelope.__dict__, "invalid_fields": fields})
    assert validated == envelope
    assert validated.as_dict() == envelope.as_dict()


@pytest.mark.parametrize(("file", "case"), _cases())
def test_case_envelopes_equal_validated_ones(file: Path, case: dict[str, Any]) -> None:
    """Every envelope ``build`` makes without re-validation for a pack case (each error unit of
    a protocol answer too) is the model pydantic validates from the same fields."""
    loaded = Case.model_validate(case)
    if loaded.response is None:
        return  # a redaction case: no envelope
    answered = ENGINES.answer(loaded, file.parent)
    for evaluation in answered.evaluations if answered is not None else []:
        _same_as_validated(evaluation.envelope)


@pytest.mark.parametrize("entry", _corpus())
def test_corpus_envelopes_equal_validated_ones(entry: dict[str, Any]) -> None:
    """The same for every recorded real-world response of the corpus."""
    body = (CORPUS / entry["file"]).read_bytes().decode("utf-8", errors="replace")
    response = {"status": entry["status"], "headers": entry.get("headers") or {}, "body": body}
    result = _run(
        response,
        entry.get("request"),
        tuple(entry.get("success_rules") or ()),
        entry.get("protocol", "http"),
    )
    if result is not None:
        _same_as_validated(result.envelope)
