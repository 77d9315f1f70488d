"""Packages the tests install once beside the repository (npm's, the MCP SDK 1.x), safely when
several pytest processes start at once (``pytest -n``): each install holds a lock file next to
what it installs, and whoever gets it second finds the work done."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold ``directory``'s install lock (a ``.install.lock`` beside it) while inside."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    with (directory.parent / f".{directory.name}.install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def npm_installed(project: Path, timeout: float = 600) -> str | None:
    """Why ``project``'s pinned npm packages cannot be had, or ``None``: ``npm ci`` once."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        return "node/npm are not installed (scripts/install-system-deps installs them)"
    modules = project / "node_modules"
    with locked(modules):
        if (modules / ".package-lock.json").exists():
            return None
        done = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    return f"npm ci failed: {done.stderr[-500:]}" if done.returncode != 0 else None
