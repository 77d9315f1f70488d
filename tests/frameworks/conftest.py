"""The framework suite's stack (started once per run) and its score table at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import summaries
from tests.frameworks.scoring import Outcome, table
from tests.frameworks.stack import Stack, running_stack

#: case id -> its scored outcome (each case's requests go out once per run: rate limits count)
OUTCOMES = pytest.StashKey[dict[str, Outcome]]()


def _wanted_apps(items: list[pytest.Item]) -> set[str] | None:
    """The apps this run's selected cases need (``-k drf`` starts DRF only); ``None``: all."""
    wanted: set[str] = set()
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or not item.nodeid.startswith("tests/frameworks/"):
            continue
        case = callspec.params.get("case")
        if case is None:
            return None  # a target test scores every case
        wanted.add(case.app)
    return wanted


@pytest.fixture(scope="session")
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """The framework apps the selected cases need, nginx, and one real ``mend run`` in front."""
    wanted = _wanted_apps(request.session.items)
    with running_stack(tmp_path_factory.mktemp("frameworks"), wanted) as running:
        yield running


@pytest.fixture(scope="session")
def outcomes(pytestconfig: pytest.Config) -> dict[str, Outcome]:
    return pytestconfig.stash.setdefault(OUTCOMES, {})


def pytest_sessionfinish(session: pytest.Session) -> None:
    scored = session.config.stash.get(OUTCOMES, {})
    if scored:
        summaries.add(
            session.config, "mend on real frameworks' errors", table(list(scored.values()))
        )
