"""The conformance batches (each taken once per run, on first need, under the run's temporary
directory) and their table at the end of the run."""

from __future__ import annotations

import pytest

from tests import summaries
from tests.conformance.suite import BATCHES, VERSION, Runs, ready, summary


@pytest.fixture(scope="session")
def conformance(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """The conformance suite's runs; skips when its npm packages cannot be installed."""
    if (why := ready()) is not None:
        pytest.skip(why)
    return Runs(tmp_path_factory.mktemp("conformance"), pytestconfig)


def pytest_sessionfinish(session: pytest.Session) -> None:
    batches = session.config.stash.get(BATCHES, [])
    if batches:
        title = f"MCP conformance suite {VERSION}: scenarios passing direct and through mend"
        summaries.add(session.config, title, summary(batches))
