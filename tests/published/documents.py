"""Real published OpenAPI documents and a real mock server, from npm at pinned versions.

``npm ci`` installs them once from ``package-lock.json`` into ``node_modules/`` here
(gitignored), as ``tests/frameworks`` installs its Node apps: GitHub's REST description
(``@octokit/openapi``, 13 MB), the classic Petstore and the Train Travel API
(``@readme/oas-examples``), and Stoplight Prism (``@stoplight/prism-cli``), a mock server that
answers its own validation problems.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.installs import npm_installed

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
#: Seconds a server (Prism, ``mend run``) gets to answer for the first time.
START_TIMEOUT_S = 60.0
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
    return npm_installed(HERE)


def document(name: str) -> Path:
    """The published document ``name`` (``DOCUMENTS``); the test is skipped without npm."""
    reason = installed()
    if reason is not None:
        pytest.skip(reason)
    path = MODULES / DOCUMENTS[name]
    assert path.is_file(), f"{path} missing from the pinned package"
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = START_TIMEOUT_S) -> None:
    """Until ``url`` answers anything at all (an error status included), or fail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server of {url} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{url} did not come up in {timeout} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)


#: Prism's log level: its warnings and violations. At ``info`` it logs every request as received,
#: body included, and its CLI's log reader has died (``LOG_COLOR_MAP[logLine.name]`` undefined,
#: the server gone) on one of Schemathesis' negative requests to GitHub's ``.../lock``.
PRISM_LOG_LEVEL = "warn"


@contextmanager
def prism(path: Path, log: Path) -> Iterator[str]:
    """Stoplight Prism mocking the document ``path`` on a free port: its base URL."""
    port = free_port()
    command = [str(PRISM), "mock", "-h", "127.0.0.1", "-p", str(port), "-v", PRISM_LOG_LEVEL]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*command, str(path)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_http(f"http://127.0.0.1:{port}/", proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop(proc)


@contextmanager
def mend_run(*args: str, log: Path) -> Iterator[str]:
    """``mend run`` with ``args`` on free ports, ready: the agent port's base URL."""
    listen, admin = free_port(), free_port()
    ports = ["--listen", f"127.0.0.1:{listen}", "--admin-listen", f"127.0.0.1:{admin}"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "proxy", "run", "--no-watch", *args, *ports],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_http(f"http://127.0.0.1:{admin}/readyz", proc)
        yield f"http://127.0.0.1:{listen}"
    finally:
        _stop(proc)
