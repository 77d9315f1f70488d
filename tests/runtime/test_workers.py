"""``mend run --workers 2``: processes share the agent port, metrics add up across them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tools.test_cli_run import ROOT, free_port, wait_http


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str, str]]:
    upstream_port = free_port()
    upstream = subprocess.Popen(
        [sys.executable, str(ROOT / "tests/data/stream_upstream.py"), str(upstream_port)]
    )
    listen, admin = free_port(), free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "proxy",
            "run",
            "--workers",
            "2",
            "--upstream",
            f"http://127.0.0.1:{upstream_port}",
            "--listen",
            f"127.0.0.1:{listen}",
            "--admin-listen",
            f"127.0.0.1:{admin}",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_http(f"http://127.0.0.1:{upstream_port}/bytes/1")
        wait_http(f"http://127.0.0.1:{admin}/readyz", timeout=30)
        wait_http(f"http://127.0.0.1:{listen}/bytes/1", timeout=30)
        yield proc, f"http://127.0.0.1:{listen}", f"http://127.0.0.1:{admin}"
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)
        upstream.terminate()
        upstream.wait(5)


def _status(url: str, method: str = "GET") -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _reloads(admin: str) -> float:
    with urllib.request.urlopen(f"{admin}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("mend_rule_reloads_total{") and 'result="success"' in line
    )


def test_metrics_aggregate_across_workers(
    workers: tuple[subprocess.Popen[bytes], str, str],
) -> None:
    """Envelopes served by either worker all show up in the supervisor's /metrics."""
    _, base, admin = workers
    for _ in range(30):
        assert _status(f"{base}/missing") == 404
    with urllib.request.urlopen(f"{admin}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    (line,) = [
        line
        for line in text.splitlines()
        if line.startswith("mend_errors_total{") and 'code="RESOURCE_NOT_FOUND"' in line
    ]
    assert float(line.rsplit(" ", 1)[1]) == 30
    with urllib.request.urlopen(f"{admin}/readyz", timeout=5) as resp:
        assert json.loads(resp.read())["workers"] == 2


def test_reload_reaches_every_worker_and_sigterm_stops_all(
    workers: tuple[subprocess.Popen[bytes], str, str],
) -> None:
    """POST /-/reload validates once and signals the workers; SIGTERM ends every process."""
    proc, _, admin = workers
    assert _status(f"{admin}/-/reload", method="POST") == 200
    # the workers reload on their own time: wait until both have counted it (2 loads + 2 reloads)
    deadline = time.monotonic() + 30
    while _reloads(admin) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    output = proc.stdout.read().decode() if proc.stdout else ""
    assert output.count('"event":"rules_reloaded"') == 2
    assert output.count('"worker":true') == 2


def test_gauges_are_combined_not_listed_per_process(
    workers: tuple[subprocess.Popen[bytes], str, str],
) -> None:
    """Reload gauges come out once (no pid label), however many workers there are."""
    _, _, admin = workers
    with urllib.request.urlopen(f"{admin}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    lines = [line for line in text.splitlines() if line.startswith("mend_rules_loaded")]
    assert len(lines) == 1
    assert "pid=" not in lines[0]
    assert float(lines[0].rsplit(" ", 1)[1]) > 100
