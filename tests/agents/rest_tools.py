"""The REST function-tool matrix: frameworks whose own function tools call a REST API with an
HTTP client, what each framework handed its model, direct and through mend.

The REST app (``tests/agents/rest_app.py``) runs once. A framework's REST runner
(``tests/agents/runners/rest_<name>_runner.py``, in the framework's own virtualenv) runs once per
(framework, style, direct or through mend) with every case on its command line: the tools
(``tests/agents/runners/http_tools.py``) call the app's base URL, or that of a fresh
``mend run --upstream <app>`` for that batch alone, since mend remembers failures per session
(docs/contract.md §7) and every runner calls from the same loopback address. The cases
(``tests/agents/rest_cases.yaml``) borrow ``patterns`` and ``leaks`` from ``cases.yaml``, and
become ``harness.Case`` values whose server is ``rest-<style>``, so the MCP matrix's verdicts
and summary judge them the same way.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar

import yaml

from tests.agents.harness import CASES as MCP_CASES
from tests.agents.harness import (
    FRAMEWORKS,
    Case,
    Framework,
    Reading,
    Taken,
    mend_in_front,
    run_batch,
)
from tests.agents.runners.http_tools import STYLE_VARIABLE, STYLES
from tests.agents.servers import Served, serve

HERE = Path(__file__).resolve().parent
REST_CASES = HERE / "rest_cases.yaml"

#: the frameworks whose own function tools call the REST app (their MCP environments)
REST_FRAMEWORKS: dict[str, Framework] = {
    name: replace(FRAMEWORKS[name], runner=runner)
    for name, runner in (
        ("pydantic-ai", "rest_pydantic_ai_runner.py"),
        ("openai-agents", "rest_openai_agents_runner.py"),
        ("langgraph", "rest_langgraph_runner.py"),
    )
}


def server_of(style: str) -> str:
    """The ``Case.server`` of a style's cases."""
    return f"rest-{style}"


def style_of(case: Case) -> str:
    return case.server.removeprefix("rest-")


def load_rest_cases(
    path: Path = REST_CASES, shared: Path = MCP_CASES
) -> tuple[list[Case], tuple[str, ...]]:
    """One case per (table entry, style), and the planted strings."""
    common = yaml.safe_load(shared.read_text(encoding="utf-8"))
    patterns: dict[str, str] = common["patterns"]
    table = yaml.safe_load(path.read_text(encoding="utf-8"))
    cases = []
    for style in STYLES:
        for case_id, spec in table["cases"].items():
            misdirections = {
                name: patterns.get(regex, regex) for name, regex in spec["misdirections"].items()
            }
            own = spec.get("styles", {}).get(style, {})
            facts = {**spec["facts"], **own.get("facts", {})}
            cases.append(
                Case(
                    id=case_id,
                    server=server_of(style),
                    about=spec["about"],
                    tool=spec["tool"],
                    arguments=spec["arguments"],
                    facts={name: regex for name, regex in facts.items() if regex is not None},
                    misdirections=misdirections,
                )
            )
    return cases, tuple(common["leaks"])


@contextmanager
def running_rest_app(logs: Path) -> Iterator[Served]:
    """The REST app, on a free loopback port."""
    python = sys.executable
    with serve("rest-app", lambda p: [python, "-m", "tests.agents.rest_app", str(p)], logs) as app:
        yield app


@dataclass
class RestMatrix(Taken):
    """The REST function-tool matrix: a batch is one tool style's cases."""

    app: str
    logs: Path
    cases: list[Case]
    leaks: tuple[str, ...]
    readings: dict[tuple[str, str, str], Reading] = field(default_factory=dict)
    broken: dict[tuple[str, str], str] = field(default_factory=dict)
    frameworks: ClassVar[dict[str, Framework]] = REST_FRAMEWORKS

    def batch(self, case: Case) -> str:
        return style_of(case)

    def _take(self, framework: Framework, style: str) -> None:
        cases = [c for c in self.cases if c.server == server_of(style)]
        styled = replace(framework, env={**framework.env, STYLE_VARIABLE: style})
        name = f"{framework.name}-{server_of(style)}"
        log = self.logs / f"{name}.log"
        direct = run_batch(styled, self.app, cases, log)
        with mend_in_front(self.app, name, self.logs) as mend:
            proxied = run_batch(styled, mend.url, cases, log)
        self._keep(framework, cases, direct, proxied)
