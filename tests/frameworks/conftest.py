"""The framework suite's stack (started once per run) and its score table at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.frameworks.scoring import Outcome, table
from tests.frameworks.stack import Stack, running_stack

#: case id -> its scored outcome (each case's requests go out once per run: rate limits count)
OUTCOMES = pytest.StashKey[dict[str, Outcome]]()


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Every framework app, nginx, and one real ``mend run`` in front of them."""
    with running_stack(tmp_path_factory.mktemp("frameworks")) as running:
        yield running


@pytest.fixture(scope="session")
def outcomes(pytestconfig: pytest.Config) -> dict[str, Outcome]:
    return pytestconfig.stash.setdefault(OUTCOMES, {})


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    scored = config.stash.get(OUTCOMES, {})
    if not scored:
        return
    terminalreporter.section("mend on real frameworks' errors")
    terminalreporter.write_line(table(list(scored.values())))
