"""Run a conformance client through a real mend: ``through_mend.py CLIENT... SERVER_URL``.

The conformance suite's ``client --command "<cmd>"`` runs ``<cmd> <server URL>`` with
``MCP_CONFORMANCE_SCENARIO`` (and ``MCP_CONFORMANCE_CONTEXT``) set. Given as the command's prefix,
this starts ``mend run --upstream <the URL's origin>`` on free loopback ports, waits for its
``/readyz``, runs the client with the URL's origin replaced by mend's (``http://localhost:PORT``,
same path), relays the client's exit code (its output goes straight through), and stops mend by
its PID whatever happens (an error, a timeout, SIGTERM from the suite). Only the MCP server goes
through mend: an authorization server the scenario names is another origin the client reaches
directly.

mend's log (its JSON lines, stdout and stderr) goes to
``$MEND_CONFORMANCE_LOGS/<scenario>.mend.log`` (a new temporary directory without it); its path is
the first line the client's stderr gets.

Only the standard library: the tests import ``running_mend`` from here for the server scenarios.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit, urlunsplit

#: the virtualenv's ``mend`` console script, beside the python running this
MEND = Path(sys.executable).with_name("mend")
#: to mend's ``/readyz`` answering 200 (generous: many start at once on two cores)
START_TIMEOUT_S = float(os.environ.get("MEND_CONFORMANCE_START_TIMEOUT_S", "60"))
#: the client's whole run; below the suite's own ``--timeout`` so mend is stopped here first
CLIENT_TIMEOUT_S = float(os.environ.get("MEND_CONFORMANCE_CLIENT_TIMEOUT_S", "80"))
#: from SIGTERM to SIGKILL (mend drains open requests for up to 25 s otherwise)
STOP_GRACE_S = 5.0
_PR_SET_PDEATHSIG = 1
_START_ATTEMPTS = 3


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def die_with_parent() -> Callable[[], object] | None:
    """A ``preexec_fn`` (Linux) having the child SIGTERMed when its parent dies, even by SIGKILL.
    libc is loaded here, in the parent: the child makes one system call between fork and exec."""
    if sys.platform != "linux":
        return None
    return partial(ctypes.CDLL(None, use_errno=True).prctl, _PR_SET_PDEATHSIG, signal.SIGTERM)


def stop(proc: subprocess.Popen[bytes], *, group: bool = False) -> None:
    """SIGTERM ``proc`` (its process group, whose id is its PID, with ``group``), SIGKILL after
    the grace; returns once it is reaped."""
    if proc.poll() is not None:
        return
    kill: Callable[[int, int], None] = os.killpg if group else os.kill
    try:
        kill(proc.pid, signal.SIGTERM)
        proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        kill(proc.pid, signal.SIGKILL)
        proc.wait(STOP_GRACE_S)
    except ProcessLookupError:
        proc.wait(STOP_GRACE_S)


@dataclass
class RunningMend:
    """A ``mend run`` process: where agents reach it, its admin port and its log."""

    proc: subprocess.Popen[bytes]
    port: int
    admin_port: int
    log: Path

    @property
    def origin(self) -> str:
        """mend's origin by the ``localhost`` name (the suite's DNS-rebinding check wants it)."""
        return f"http://localhost:{self.port}"


def _ready(admin_port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/readyz", timeout=1) as answer:
            return int(answer.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def _tail(log: Path) -> str:
    return log.read_text(encoding="utf-8", errors="replace")[-2000:]


def _start(upstream: str, log: Path, deadline: float) -> RunningMend | None:
    """One try: mend on two fresh ports, ready; ``None`` if it exited first (a port taken)."""
    port, admin_port = free_port(), free_port()
    argv = [
        str(MEND),
        "run",
        "--upstream",
        upstream,
        "--listen",
        f"127.0.0.1:{port}",
        "--admin-listen",
        f"127.0.0.1:{admin_port}",
    ]
    with log.open("ab") as out:
        out.write(f"# {' '.join(argv)}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent(),  # noqa: PLW1509 (one prctl call, see there)
        )
    mend = RunningMend(proc, port, admin_port, log)
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return None
            if _ready(admin_port):
                return mend
            time.sleep(0.05)
    except BaseException:
        stop(proc)
        raise
    stop(proc)
    raise RuntimeError(f"mend was not ready in {START_TIMEOUT_S} s; its log {log}:\n{_tail(log)}")


@contextmanager
def running_mend(
    upstream: str, log: Path, timeout: float = START_TIMEOUT_S
) -> Iterator[RunningMend]:
    """A ready ``mend run --upstream upstream`` logging to ``log``, stopped by its PID on exit."""
    log.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    for _ in range(_START_ATTEMPTS):
        mend = _start(upstream, log, deadline)
        if mend is not None:
            break
    else:
        raise RuntimeError(
            f"mend exited at start {_START_ATTEMPTS} times; its log {log}:\n{_tail(log)}"
        )
    try:
        yield mend
    finally:
        stop(mend.proc)


def through(url: str, origin: str) -> str:
    """``url`` with its scheme and authority replaced by ``origin``'s."""
    parts, new = urlsplit(url), urlsplit(origin)
    return urlunsplit((new.scheme, new.netloc, parts.path, parts.query, parts.fragment))


def log_path(scenario: str) -> Path:
    """Where mend's log for ``scenario`` goes (``MEND_CONFORMANCE_LOGS``, else a new temp dir)."""
    logs = os.environ.get("MEND_CONFORMANCE_LOGS") or tempfile.mkdtemp(prefix="mend-conformance-")
    return Path(logs) / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', scenario)}.mend.log"


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: through_mend.py CLIENT_COMMAND... SERVER_URL", file=sys.stderr)
        return 2
    *client, url = argv
    # the suite SIGTERMs its client on timeout; its parent's death (even by SIGKILL) is one too
    signal.signal(signal.SIGTERM, _terminated)
    signal.signal(signal.SIGINT, _terminated)
    if (arm := die_with_parent()) is not None:
        arm()
    log = log_path(os.environ.get("MCP_CONFORMANCE_SCENARIO", "unknown"))
    print(f"through_mend: mend log {log}", file=sys.stderr, flush=True)
    parts = urlsplit(url)
    with running_mend(f"{parts.scheme}://{parts.netloc}", log) as mend:
        target = through(url, mend.origin)
        print(
            f"through_mend: {url} -> {target} (mend pid {mend.proc.pid})",
            file=sys.stderr,
            flush=True,
        )
        proc = subprocess.Popen(
            [*client, target],
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent(),  # noqa: PLW1509 (one prctl call, see there)
        )
        try:
            return proc.wait(CLIENT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            print(f"through_mend: the client ran past {CLIENT_TIMEOUT_S} s", file=sys.stderr)
            return 124
        finally:
            stop(proc)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
