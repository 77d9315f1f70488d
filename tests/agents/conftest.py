"""The agent matrix's servers (started once per run), its readings, and its record at the end:
a JSON file under the run's temporary directory and a summary table."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.agents.harness import Matrix, load_cases, running_servers, summary

#: the run's matrix, for the summary at the end
MATRIX = pytest.StashKey[Matrix]()
RECORD = pytest.StashKey[str]()


@pytest.fixture(scope="session")
def matrix(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Matrix]:
    """The failing servers, and the readings each framework's model got from them, taken on
    first need; recorded to ``agents/matrix.json`` under the run's temporary directory."""
    logs = tmp_path_factory.mktemp("agents")
    cases, leaks = load_cases()
    with running_servers(logs) as servers:
        taken = Matrix(servers, cases, leaks)
        pytestconfig.stash[MATRIX] = taken
        yield taken
    record = logs / "matrix.json"
    record.write_text(json.dumps(taken.record(), indent=2, ensure_ascii=False), encoding="utf-8")
    pytestconfig.stash[RECORD] = str(record)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    taken = config.stash.get(MATRIX, None)
    if taken is None or not taken.readings:
        return
    terminalreporter.section("what the model reads, direct and through mend")
    terminalreporter.write_line(summary(taken.record()))
    record = config.stash.get(RECORD, None)
    if record:
        terminalreporter.write_line(f"matrix: {record}")
