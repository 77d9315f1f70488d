"""What the memory tests replay (``test_match_memory``, ``test_fields_memory``,
``test_build_memory``): every pack case and every recorded corpus response, each as its rule set,
a maker of fresh exchanges and its redactor, so a test can answer one twice and compare."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.policy.evaluate import agent_redactor, recorded_exchange
from proxy.policy.exchange import Exchange
from proxy.policy.redaction import Redactor
from proxy.policy.rules.ruleset import RuleSet
from proxy.tools.ruletest.cases import Case
from proxy.tools.ruletest.engines import Engines, exchange_for

ROOT = Path(__file__).resolve().parents[2]
CASES = sorted((ROOT / "rules" / "tests").glob("*.yaml"))
CORPUS = ROOT / "tests" / "corpus" / "responses"


@dataclass(frozen=True)
class Replay:
    """A response to answer again: its route's rule set, fresh exchanges of it, its redactor."""

    ruleset: RuleSet
    make: Callable[[], Exchange]
    redactor: Redactor


def pack_cases() -> list[Any]:
    """``(file, case)`` of every shipped pack case, for ``pytest.mark.parametrize``."""
    out = []
    for file in CASES:
        for case in yaml.safe_load(file.read_text(encoding="utf-8"))["cases"]:
            out.append(pytest.param(file, case, id=f"{file.stem}: {case['name']}"))
    return out


def corpus_entries() -> list[Any]:
    """Every recorded corpus response's manifest entry, for ``pytest.mark.parametrize``."""
    manifest = yaml.safe_load((CORPUS / "manifest.yaml").read_text(encoding="utf-8"))
    return [pytest.param(entry, id=entry["file"]) for entry in manifest["responses"]]


class Replays:
    """Replays on engines of their own (a test module's memories are its own)."""

    def __init__(self) -> None:
        self.engines = Engines()

    def pack(self, file: Path, case: dict[str, Any]) -> Replay | None:
        """A pack case's response (``None``: a redaction case, with none)."""
        loaded = Case.model_validate(case)
        response = loaded.response
        if response is None:
            return None
        engine = self.engines.get(
            [file.parent / r for r in loaded.rules], loaded.route.success_rules, loaded.redaction
        )
        return Replay(
            engine.routes["default"],
            lambda: exchange_for(loaded.request, response),
            engine.redactor_for("default"),
        )

    def corpus(self, entry: dict[str, Any]) -> Replay:
        """A recorded real-world response, on the shipped packs."""
        body = (CORPUS / entry["file"]).read_bytes()
        request = entry.get("request") or {}
        success = tuple(entry.get("success_rules") or ())
        ruleset = self.engines.get(success_rules=success).routes["default"]

        def make() -> Exchange:
            return recorded_exchange(
                status=entry["status"],
                body=body,
                headers=entry.get("headers") or {},
                method=request.get("method", "GET"),
                path=request.get("path", "/"),
            )

        return Replay(ruleset, make, agent_redactor())
