"""``mend check --coverage`` on the bodies recorded from the real framework apps.

tests/frameworks/recorded/ holds each case's answer straight from its app (``python -m
tests.frameworks.record tests/frameworks/recorded`` rewrites it). Only the cases that cases.yaml
documents as deliberately answered by a built-in fallback may be answered by one.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.frameworks.scoring import load_cases

RECORDED = Path(__file__).resolve().parent / "recorded"


def _fallback_only() -> set[str]:
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "check", "--coverage", str(RECORDED)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("only a fallback")), None)
    if start is None:
        return set()
    names = set()
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        names.add(line.split()[0])
    return names


def test_only_documented_cases_fall_back() -> None:
    """Every recorded framework answer that only a fallback explains is documented as deliberate
    in cases.yaml, and every documented one still falls back (else the note is stale)."""
    documented = {c.id for c in load_cases() if c.fallback}
    assert _fallback_only() == documented


def test_every_http_case_is_recorded() -> None:
    """The recordings cover every non-GraphQL case (rerun tests/frameworks/record.py when not)."""
    recorded = {p.stem for p in RECORDED.glob("*.yaml")}
    assert recorded == {c.id for c in load_cases() if c.app != "strawberry"}
