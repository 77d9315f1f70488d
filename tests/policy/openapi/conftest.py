"""Stoplight Prism mocking a published document, ``mend run`` in front of it with the document
and without: the module-scoped fixtures the published-document tests share."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.policy.openapi.prism_cases import rooted
from tests.published.documents import document, mend_run, prism

#: Prism's URL, mend's with the document, mend's without it.
Served = tuple[str, str, str]


@contextmanager
def _served(path: Path, logs: Path) -> Iterator[Served]:
    with (
        prism(path, logs / "prism.log") as upstream,
        mend_run("--upstream", upstream, "--openapi", str(path), log=logs / "mend.log") as mend,
        mend_run("--upstream", upstream, log=logs / "plain.log") as plain,
    ):
        yield upstream, mend, plain


@pytest.fixture(scope="module")
def petstore(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Prism mocking Petstore; ``mend run`` in front with the document and without: three URLs.

    Prism serves the paths at its root whatever ``servers`` says, so mend is given the document
    with ``servers`` naming that root, as an operator deploying a mock would."""
    logs = tmp_path_factory.mktemp("petstore")
    with _served(rooted("petstore", logs), logs) as urls:
        yield urls


@pytest.fixture(scope="module")
def train_travel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Prism mocking the Train Travel API (OpenAPI 3.1), mend in front, as ``petstore``."""
    logs = tmp_path_factory.mktemp("train-travel")
    with _served(rooted("train-travel", logs), logs) as urls:
        yield urls


@pytest.fixture(scope="module")
def github(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Prism mocking GitHub's document (its ``servers`` has no base path); mend in front."""
    logs = tmp_path_factory.mktemp("github")
    with _served(document("github"), logs) as urls:
        yield urls
