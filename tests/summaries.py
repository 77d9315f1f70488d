"""Tables a suite prints at the end of the run (its score, its matrix), whichever process ran it.

Under ``pytest -n`` the tests run in worker processes whose terminal nobody sees: ``add`` there
puts a section into the worker's ``workeroutput``, which pytest-xdist hands the controller when
the worker ends (``collect``, its ``pytest_testnodedown``); without workers it goes straight to
the stash. ``print_all`` (the root conftest's ``pytest_terminal_summary``) writes every section.
"""

from __future__ import annotations

from typing import Any

import pytest

SECTIONS = pytest.StashKey[list[tuple[str, str]]]()
_KEY = "mend_summaries"


def add(config: pytest.Config, title: str, text: str) -> None:
    """A section to print at the end of the run."""
    output: dict[str, Any] | None = getattr(config, "workeroutput", None)
    if output is not None:
        output.setdefault(_KEY, []).append([title, text])
    else:
        config.stash.setdefault(SECTIONS, []).append((title, text))


def collect(config: pytest.Config, node: Any) -> None:
    """The sections a finished xdist worker sent."""
    for title, text in getattr(node, "workeroutput", {}).get(_KEY, []):
        config.stash.setdefault(SECTIONS, []).append((str(title), str(text)))


def print_all(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    for title, text in config.stash.get(SECTIONS, []):
        terminalreporter.section(title)
        terminalreporter.write_line(text)
