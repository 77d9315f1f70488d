"""The agent matrix's servers (started once per run), its readings, and its record at the end:
a JSON file under the run's temporary directory and a summary table; the same for the REST
function-tool matrix (``tests/agents/rest_tools.py``)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests import summaries
from tests.agents.harness import Matrix, load_cases, running_servers, summary
from tests.agents.rest_tools import RestMatrix, load_rest_cases, running_rest_app

#: the run's matrix, for the summary at the end
MATRIX = pytest.StashKey[Matrix]()
RECORD = pytest.StashKey[str]()
REST_MATRIX = pytest.StashKey[RestMatrix]()
REST_RECORD = pytest.StashKey[str]()


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


@pytest.fixture(scope="session")
def rest_matrix(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RestMatrix]:
    """The REST app, and the readings each framework's model got from its function tools on
    it, taken on first need; recorded to ``rest-tools/matrix.json`` under the run's temporary
    directory."""
    logs = tmp_path_factory.mktemp("rest-tools")
    cases, leaks = load_rest_cases()
    with running_rest_app(logs) as app:
        taken = RestMatrix(app.url, logs, cases, leaks)
        pytestconfig.stash[REST_MATRIX] = taken
        yield taken
    record = logs / "matrix.json"
    record.write_text(json.dumps(taken.record(), indent=2, ensure_ascii=False), encoding="utf-8")
    pytestconfig.stash[REST_RECORD] = str(record)


def _section(
    config: pytest.Config,
    title: str,
    taken: Matrix | RestMatrix | None,
    record: str | None,
) -> None:
    if taken is None or not taken.readings:
        return
    text = summary(taken.record()) + (f"\nmatrix: {record}" if record else "")
    summaries.add(config, title, text)


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    _section(
        config,
        "what the model reads, direct and through mend",
        config.stash.get(MATRIX, None),
        config.stash.get(RECORD, None),
    )
    _section(
        config,
        "what the model reads from REST function tools, direct and through mend",
        config.stash.get(REST_MATRIX, None),
        config.stash.get(REST_RECORD, None),
    )
