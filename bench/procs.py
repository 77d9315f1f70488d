"""Child processes for the benchmark: start in their own process group, always reap.

Every server the harness starts runs in a new session so that one killpg() takes down the
server together with anything it forked (nginx workers, mend's worker processes), even if
the harness itself dies halfway through a run.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO


class BenchError(RuntimeError):
    """A condition that makes a measurement impossible; the message says what to do."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def pinned(cmd: Sequence[str], cpus: str | None) -> list[str]:
    if cpus is None:
        return list(cmd)
    return ["taskset", "-c", cpus, *cmd]


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, limit: int = 2000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-limit:].decode("utf-8", "replace")

    def stop(self, timeout: float = 5.0) -> None:
        if self.popen.poll() is None:
            _signal_group(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                _signal_group(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout)
        # Stragglers forked by the server may outlive the leader.
        _signal_group(self.popen.pid, signal.SIGKILL)
        if self._log is not None:
            self._log.close()
            self._log = None


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class ProcessGroup:
    """Owns every process of one harness run; ``close()`` stops them all, newest first."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[Proc] = []
        self.started = 0

    def start(
        self,
        name: str,
        cmd: Sequence[str],
        *,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> Proc:
        if shutil.which(cmd[0]) is None and not Path(cmd[0]).exists():
            raise BenchError(f"{name}: executable {cmd[0]!r} not found")
        self.started += 1
        # One log per process: several starts of one configuration must not share a tail.
        log_path = self.log_dir / f"{name}-{self.started}.log"
        log = log_path.open("ab")
        # Output goes to a file, not a pipe: a full pipe would stall a server that logs per
        # request and turn the benchmark into a measurement of the harness.
        popen = subprocess.Popen(
            list(cmd),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        proc = Proc(name, popen, log_path, log)
        self.procs.append(proc)
        return proc

    def stop(self, proc: Proc) -> None:
        proc.stop()
        if proc in self.procs:
            self.procs.remove(proc)

    def close(self) -> None:
        while self.procs:
            self.procs.pop().stop()


def http_get(
    port: int, path: str, *, timeout: float = 2.0, method: str = "GET", body: bytes | None = None
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    finally:
        conn.close()


def wait_ready(
    proc: Proc, port: int, path: str, *, timeout: float = 20.0, ok: Sequence[int] = (200,)
) -> float:
    """Poll ``GET path`` until one of ``ok``; return seconds waited. Raise with the log tail."""
    start = time.monotonic()
    deadline = start + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if not proc.alive():
            raise BenchError(
                f"{proc.name} exited with code {proc.popen.returncode} before it was ready:\n"
                f"{proc.log_tail()}"
            )
        try:
            status, _, _ = http_get(port, path, timeout=0.5)
        except OSError as exc:
            last = repr(exc)
        else:
            if status in ok:
                return time.monotonic() - start
            last = f"HTTP {status}"
        time.sleep(0.01)
    raise BenchError(
        f"{proc.name} not ready on 127.0.0.1:{port}{path} after {timeout:.0f}s ({last}):\n"
        f"{proc.log_tail()}"
    )


def descendants(pid: int) -> Iterator[int]:
    yield pid
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            yield from descendants(int(child))


def rss_bytes(pid: int, *, tree: bool = True) -> int:
    """VmRSS of ``pid`` (summed over its descendants when ``tree``); 0 when it is gone."""
    total = 0
    for p in descendants(pid) if tree else iter([pid]):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
                    break
        except (OSError, ValueError):
            continue
    return total
