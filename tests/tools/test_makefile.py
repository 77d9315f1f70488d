"""The Makefile's two README commands: ``make demo ARGS=...`` and ``make test``'s lint."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: A stand-in for the virtualenv's python: logs its arguments, fails ``-m pytest``.
FAKE_PYTHON = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/calls.log"
[ "$2" = pytest ] && exit 1
exit 0
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The Makefile in a bare directory, with a fake python and no system packages to install."""
    if shutil.which("make") is None:
        pytest.skip("no make")
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "install-system-deps").write_text("true\n")
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    (tmp_path / "stamp").touch()
    (tmp_path / "pyproject.toml").touch()
    return tmp_path


def _make(checkout: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = ["make", "-s", f"PY={checkout / 'python'}", f"STAMP={checkout / 'stamp'}", *args]
    return subprocess.run(
        command, check=False, cwd=checkout, capture_output=True, text=True, timeout=60
    )


def test_make_demo_passes_args_to_the_demo(checkout: Path) -> None:
    """``make demo ARGS=--keep-running`` runs ``python -m demo.run --keep-running``."""
    assert _make(checkout, "demo", "ARGS=--keep-running").returncode == 0
    assert (checkout / "calls.log").read_text().splitlines() == ["-m demo.run --keep-running"]


def test_make_test_lints_after_a_failed_test_run_and_still_fails(checkout: Path) -> None:
    """A failing pytest does not stop ruff and mypy from running, and ``make test`` fails."""
    result = _make(checkout, "test")
    calls = (checkout / "calls.log").read_text().splitlines()
    assert result.returncode != 0
    assert calls == [
        "-m pytest",
        "-m ruff check .",
        "-m ruff format --check .",
        "-m mypy",
    ]
