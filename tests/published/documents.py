"""Real published OpenAPI documents and a real mock server, from npm at pinned versions.

``npm ci`` installs them once from ``package-lock.json`` into ``node_modules/`` here
(gitignored), as ``tests/frameworks`` installs its Node apps: GitHub's REST description
(``@octokit/openapi``, 13 MB), the classic Petstore and the Train Travel API
(``@readme/oas-examples``), and Stoplight Prism (``@stoplight/prism-cli``), a mock server that
answers its own validation problems.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
MODULES = HERE / "node_modules"
#: name -> the document's path inside node_modules
DOCUMENTS = {
    "github": "@octokit/openapi/generated/api.github.com.json",
    "petstore": "@readme/oas-examples/3.0/json/petstore.json",
    "train-travel": "@readme/oas-examples/3.1/json/train-travel.json",
}
PRISM = MODULES / ".bin" / "prism"


def installed() -> str | None:
    """Why the packages cannot be had, or ``None``: installs the pinned packages once."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        return "node/npm are not installed (scripts/install-system-deps installs them)"
    if not (MODULES / ".package-lock.json").exists():
        done = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=HERE,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            return f"npm ci failed: {done.stderr[-500:]}"
    return None


def document(name: str) -> Path:
    """The published document ``name`` (``DOCUMENTS``); the test is skipped without npm."""
    reason = installed()
    if reason is not None:
        pytest.skip(reason)
    path = MODULES / DOCUMENTS[name]
    assert path.is_file(), f"{path} missing from the pinned package"
    return path
