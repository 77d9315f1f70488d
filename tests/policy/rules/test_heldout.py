"""Accuracy of the default packs on an independent, held-out corpus of real-world responses.

``tests/corpus/heldout/*.yaml`` holds responses written from what real frameworks, gateways and
SaaS APIs send (not copies of the pack fixtures), each with the envelope an agent should get:
category, retryable, action where clear, the offending fields as RFC 6901 pointers, and
retry_after_ms whenever the response says when. Non-errors say ``expect: passthrough``.

The accuracy targets are asserted in aggregate, and every miss is printed as a table so a failure
says what to fix. Non-errors are checked one by one: a 2xx must stream through on a plain route,
and also on a route whose success_rules enable every pack.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.policy.evaluate import Evaluation
from proxy.tools.ruletest.engines import Engines, replay

HELDOUT = Path(__file__).resolve().parents[2] / "corpus" / "heldout"

TARGET_CATEGORY = 0.95
TARGET_RETRYABLE = 0.98
TARGET_FIELDS = 0.90
TARGET_RETRY_AFTER = 1.0


def _load() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    for file in sorted(HELDOUT.glob("*.yaml")):
        for case in yaml.safe_load(file.read_text(encoding="utf-8"))["cases"]:
            case["id"] = f"{file.stem}: {case['name']}"
            cases.append(case)
    return cases


CASES = _load()


ENGINES = Engines()


def _run(case: dict[str, Any], success_rules: tuple[str, ...]) -> Evaluation | None:
    return replay(ENGINES, case["response"], case.get("request"), success_rules)


@dataclass
class Score:
    hits: int = 0
    total: int = 0

    def add(self, ok: bool) -> None:
        self.total += 1
        self.hits += ok

    @property
    def rate(self) -> float:
        return self.hits / self.total if self.total else 1.0


@dataclass
class Report:
    category: Score = field(default_factory=Score)
    retryable: Score = field(default_factory=Score)
    action: Score = field(default_factory=Score)
    fields: Score = field(default_factory=Score)
    retry_after: Score = field(default_factory=Score)
    misses: list[tuple[str, str, str, str, str]] = field(default_factory=list)

    def miss(self, case: dict[str, Any], what: str, want: Any, got: Any, rule: str) -> None:
        self.misses.append((case["id"], what, str(want), str(got), rule))

    def table(self) -> str:
        rows = [("case", "what", "expected", "got", "rule"), *self.misses]
        widths = [min(60, max(len(r[i]) for r in rows)) for i in range(5)]
        lines = [" | ".join(c[:w].ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
        summary = (
            f"category {self.category.hits}/{self.category.total} ({self.category.rate:.1%}), "
            f"retryable {self.retryable.hits}/{self.retryable.total} ({self.retryable.rate:.1%}), "
            f"action {self.action.hits}/{self.action.total} ({self.action.rate:.1%}), "
            f"fields {self.fields.hits}/{self.fields.total} ({self.fields.rate:.1%}), "
            f"retry_after_ms {self.retry_after.hits}/{self.retry_after.total} "
            f"({self.retry_after.rate:.1%})"
        )
        return "\n".join([summary, *lines])


def _score() -> Report:
    report = Report()
    for case in CASES:
        expect = case["expect"]
        if expect == "passthrough":
            continue
        result = _run(case, tuple(case.get("success_rules") or ()))
        if result is None:
            report.category.add(False)
            report.retryable.add(False)
            report.miss(case, "envelope", "an envelope", "passed through", "-")
            continue
        env = result.envelope
        rule = env.rule
        category = env.category.value
        report.category.add(category == expect["category"])
        if category != expect["category"]:
            report.miss(case, "category", expect["category"], category, rule)
        report.retryable.add(env.retryable == expect["retryable"])
        if env.retryable != expect["retryable"]:
            report.miss(case, "retryable", expect["retryable"], env.retryable, rule)
        if "action" in expect:
            report.action.add(env.action.value == expect["action"])
            if env.action.value != expect["action"]:
                report.miss(case, "action", expect["action"], env.action.value, rule)
        if "fields" in expect:
            got = [f.field for f in env.invalid_fields]
            missing = [f for f in expect["fields"] if f not in got]
            report.fields.add(not missing)
            if missing:
                report.miss(case, "fields", expect["fields"], got, rule)
        if "retry_after_ms" in expect:
            ok = env.retry_after_ms == expect["retry_after_ms"]
            report.retry_after.add(ok)
            if not ok:
                report.miss(
                    case, "retry_after_ms", expect["retry_after_ms"], env.retry_after_ms, rule
                )
    return report


def test_corpus_is_large_enough() -> None:
    errors = [c for c in CASES if c["expect"] != "passthrough"]
    passthrough = [c for c in CASES if c["expect"] == "passthrough"]
    assert len(CASES) >= 80
    assert len(passthrough) >= 10
    assert sum(1 for c in errors if "fields" in c["expect"]) >= 20
    assert len({c["id"] for c in CASES}) == len(CASES), "case names repeat"


def test_accuracy_targets() -> None:
    """Aggregate accuracy on the held-out corpus meets every target."""
    report = _score()
    print("\n" + report.table())
    assert report.category.rate >= TARGET_CATEGORY, report.table()
    assert report.retryable.rate >= TARGET_RETRYABLE, report.table()
    assert report.fields.rate >= TARGET_FIELDS, report.table()
    assert report.retry_after.rate >= TARGET_RETRY_AFTER, report.table()


_PASSTHROUGH = [pytest.param(c, id=c["id"]) for c in CASES if c["expect"] == "passthrough"]


@pytest.mark.parametrize("case", _PASSTHROUGH)
@pytest.mark.parametrize("success_rules", [(), ("*",)], ids=["plain", "all-success-rules"])
def test_non_error_passes_through(case: dict[str, Any], success_rules: tuple[str, ...]) -> None:
    """A success that merely looks error-ish is never rewritten, whatever the route opts into."""
    result = _run(case, success_rules)
    assert result is None, f"rewritten by {result.match.rule.id if result else ''}"
