"""A real ``redis-server`` for the shared-state tests: a free loopback port, no persistence,
stopped by its PID (``scripts/install-system-deps`` installs the Debian package)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.hostile.procs import free_port, wait_port

REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"


@dataclass
class RedisServer:
    port: int
    workdir: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start it (again, on the same port, after ``kill``)."""
        self.proc = subprocess.Popen(
            [
                REDIS,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--daemonize", "no",
                "--dir", str(self.workdir),
                "--loglevel", "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_port(self.port, timeout=10)

    def kill(self) -> None:
        """SIGKILL, as a crash would: no goodbye to its clients."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@contextmanager
def running_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A started ``RedisServer`` (skips the test when redis-server is not installed)."""
    if not Path(REDIS).exists():
        pytest.skip("redis-server is not installed (run scripts/install-system-deps)")
    server = RedisServer(free_port(), tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()
