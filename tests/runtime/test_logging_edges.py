"""What a running mend says about itself (issue 39): the ``started`` line names each route's
upstream (never its password), ``--log-level`` and the per-request line's sampling, the admin
port's ``Server`` header and a ``/metrics`` without ``_created`` twins. A real ``mend run``
process, a real upstream, curl as the client."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.hostile.procs import free_port, stream_upstream, wait_http

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    """The streaming test upstream: ``/bytes/N`` answers 200, anything else 404."""
    with stream_upstream(ROOT) as url:
        yield url


class Running:
    """A ``mend run`` process: its agent and admin URLs, and (once stopped) its log lines."""

    def __init__(self, *args: str) -> None:
        self.listen, self.admin = free_port(), free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "proxy",
                "run",
                *args,
                *("--listen", f"127.0.0.1:{self.listen}"),
                *("--admin-listen", f"127.0.0.1:{self.admin}"),
                "--no-watch",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_http(f"http://127.0.0.1:{self.admin}/healthz")

    def curl(self, url: str) -> str:
        """``curl -si URL``: the status line, headers and body as curl prints them (lines end
        in ``\\n``: text mode)."""
        result = subprocess.run(
            ["curl", "-si", "--max-time", "10", url],
            capture_output=True,
            text=True,
            timeout=15,
            check=True,
        )
        return result.stdout

    def get(self, path: str) -> str:
        return self.curl(f"http://127.0.0.1:{self.listen}{path}")

    def stop(self) -> list[dict[str, Any]]:
        """Stop it (SIGTERM) and return every JSON line it wrote."""
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=30)
        return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.fixture
def start() -> Iterator[Any]:
    started: list[Running] = []

    def run(*args: str) -> Running:
        started.append(Running(*args))
        return started[-1]

    yield run
    for running in started:
        if running.proc.poll() is None:
            running.proc.kill()
            running.proc.wait(10)


def _requests(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if line.get("event") == "request"]


def _config(tmp_path: Path, upstream: str, extra: str) -> str:
    config = tmp_path / "mend.yaml"
    config.write_text(f"{extra}\nroutes: [{{name: api, upstream: '{upstream}'}}]\n")
    return str(config)


def test_started_names_each_route_upstream_without_its_password(start: Any, upstream: str) -> None:
    """``started`` has ``upstreams: {route: url}``; a URL's userinfo is ``***``."""
    with_password = upstream.replace("http://", "http://bob:hunter2@")
    lines = start("--upstream", with_password).stop()
    started = next(line for line in lines if line["event"] == "started")
    assert started["upstreams"] == {"default": upstream.replace("http://", "http://***@")}
    assert "hunter2" not in json.dumps(lines)


def test_admin_port_answers_server_mend(start: Any, upstream: str) -> None:
    """``Server: mend`` on /metrics, /healthz and a 404, not ``Python/3.x aiohttp/3.y``."""
    mend = start("--upstream", upstream)
    for path in ("/metrics", "/healthz", "/no-such-page"):
        head = mend.curl(f"http://127.0.0.1:{mend.admin}{path}").split("\n\n")[0]
        servers = [h for h in head.splitlines() if h.lower().startswith("server:")]
        assert servers == ["Server: mend"], (path, head)


def test_metrics_has_no_created_series(start: Any, upstream: str) -> None:
    """After a request, /metrics has its counters and histograms but no ``_created`` line."""
    mend = start("--upstream", upstream)
    mend.get("/bytes/1")
    metrics = mend.curl(f"http://127.0.0.1:{mend.admin}/metrics")
    assert "mend_requests_total{" in metrics
    assert "_created" not in metrics


def test_log_level_warning_drops_info_lines(start: Any, upstream: str) -> None:
    """``--log-level warning``: no ``started`` line and no request lines (both are info)."""
    mend = start("--upstream", upstream, "--log-level", "warning")
    mend.get("/bytes/1")
    mend.get("/missing")
    lines = mend.stop()
    assert [line for line in lines if line["level"] == "info"] == []


def test_log_level_info_is_the_default(start: Any, upstream: str) -> None:
    """Without the flag, the ``started`` line and every request's line are written."""
    mend = start("--upstream", upstream)
    mend.get("/bytes/1")
    lines = mend.stop()
    assert any(line["event"] == "started" for line in lines)
    assert len(_requests(lines)) == 1


def test_sample_zero_logs_errors_but_no_successes(
    start: Any, upstream: str, tmp_path: Path
) -> None:
    """``access_log_sample: 0``: a 200 gets no line, the upstream's 404 still does."""
    mend = start("--config", _config(tmp_path, upstream, "access_log_sample: 0.0"))
    for _ in range(3):
        mend.get("/bytes/1")
    mend.get("/missing")
    requests = _requests(mend.stop())
    assert [(r["path"], r["status"]) for r in requests] == [("/missing", 404)]


def test_access_log_false_logs_no_request_at_all(start: Any, upstream: str, tmp_path: Path) -> None:
    """``access_log: false``: neither the 200 nor the 404 gets a line; ``started`` still does."""
    mend = start("--config", _config(tmp_path, upstream, "access_log: false"))
    mend.get("/bytes/1")
    mend.get("/missing")
    lines = mend.stop()
    assert _requests(lines) == []
    assert any(line["event"] == "started" for line in lines)


def test_workers_supervisor_answers_server_mend_without_created(start: Any, upstream: str) -> None:
    """Under ``--workers 2`` the supervisor's admin port, whose /metrics merges the workers'
    (multiprocess mode), also says ``Server: mend`` and has no ``_created`` line."""
    mend = start("--upstream", upstream, "--workers", "2")
    wait_http(f"http://127.0.0.1:{mend.admin}/readyz", timeout=60)
    mend.get("/bytes/1")
    answer = mend.curl(f"http://127.0.0.1:{mend.admin}/metrics")
    head, _, metrics = answer.partition("\n\n")
    assert "Server: mend" in head.splitlines()
    assert "mend_requests_total{" in metrics
    assert "_created" not in metrics
