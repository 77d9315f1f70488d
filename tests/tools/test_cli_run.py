"""``mend run`` as an operator starts it: a real process, real ports, real signals."""

from __future__ import annotations

import hashlib
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hostile.procs import stream_upstream as streaming

ROOT = Path(__file__).resolve().parents[2]
CHUNK = bytes(range(256)) * 1024


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(url: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{url} did not come up")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def mend(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "proxy", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.fixture
def stream_upstream() -> Iterator[str]:
    with streaming(ROOT) as url:
        yield url


@pytest.fixture
def running_mend(stream_upstream: str) -> Iterator[tuple[subprocess.Popen[bytes], str, str]]:
    listen, admin = free_port(), free_port()
    proc = mend(
        "run",
        "--upstream",
        stream_upstream,
        "--listen",
        f"127.0.0.1:{listen}",
        "--admin-listen",
        f"127.0.0.1:{admin}",
    )
    try:
        wait_http(f"http://127.0.0.1:{admin}/readyz")
        yield proc, f"http://127.0.0.1:{listen}", f"http://127.0.0.1:{admin}"
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)


def test_check_names_file_and_line_of_a_broken_regex(tmp_path: Path) -> None:
    """``mend check`` exits non-zero with ``file:line: bad regex``."""
    bad = tmp_path / "broken.yaml"
    bad.write_text(
        "rules:\n  - id: x.y\n    when:\n      body: '(oops'\n"
        "    envelope: {code: X, category: internal}\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "proxy", "check", str(bad)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert f"{bad}:4:" in result.stderr
    assert "bad regex" in result.stderr


def test_run_refuses_to_start_on_bad_rules(tmp_path: Path) -> None:
    """``mend run`` with a broken rule file exits with the same file:line error."""
    bad = tmp_path / "broken.yaml"
    bad.write_text("rules:\n  - id: x.y\n    envelope: {code: bad-code, category: internal}\n")
    proc = mend(
        "run",
        "--upstream",
        "http://127.0.0.1:9",
        "--rules",
        str(bad),
        "--listen",
        f"127.0.0.1:{free_port()}",
        "--admin-listen",
        f"127.0.0.1:{free_port()}",
    )
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert err.decode().startswith(f"mend: error: {bad}:3:")


def test_run_serves_and_stops_on_sigterm(
    running_mend: tuple[subprocess.Popen[bytes], str, str],
) -> None:
    """A started mend answers health checks and exits cleanly on SIGTERM."""
    proc, _, admin = running_mend
    with urllib.request.urlopen(f"{admin}/healthz", timeout=2) as resp:
        assert resp.status == 200
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc to see the loop")
def test_run_serves_on_uvloop_by_default(
    running_mend: tuple[subprocess.Popen[bytes], str, str],
) -> None:
    """A ``mend run`` given no option about it runs on uvloop: its extension module is mapped
    into the process (how the bench tells the loop too, ``bench/harness.py``). issue 29"""
    proc, _, _ = running_mend
    assert "/uvloop/" in Path(f"/proc/{proc.pid}/maps").read_text()


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc for RSS")
def test_large_download_streams_in_flat_memory(
    running_mend: tuple[subprocess.Popen[bytes], str, str],
) -> None:
    """100 MB through mend arrives byte-identical while mend's RSS grows by under 20 MB."""
    proc, base, _ = running_mend
    size = 100 * 1024 * 1024
    before = rss_kib(proc.pid)
    peak = before
    digest = hashlib.sha256()
    with urllib.request.urlopen(f"{base}/bytes/{size}", timeout=60) as resp:
        while chunk := resp.read(1 << 20):
            digest.update(chunk)
            peak = max(peak, rss_kib(proc.pid))
    expected = hashlib.sha256()
    for start in range(0, size, len(CHUNK)):
        expected.update(CHUNK[: min(len(CHUNK), size - start)])
    assert digest.hexdigest() == expected.hexdigest()
    assert (peak - before) < 20 * 1024, f"RSS grew {peak - before} KiB"


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc for RSS")
def test_large_upload_streams_in_flat_memory(
    running_mend: tuple[subprocess.Popen[bytes], str, str],
) -> None:
    """A 100 MB upload reaches the upstream byte-identical without mend buffering it."""
    proc, base, _ = running_mend
    size = 100 * 1024 * 1024
    expected = hashlib.sha256()
    peak = before = rss_kib(proc.pid)

    def body() -> Iterator[bytes]:
        nonlocal peak
        for start in range(0, size, len(CHUNK)):
            piece = CHUNK[: min(len(CHUNK), size - start)]
            expected.update(piece)
            peak = max(peak, rss_kib(proc.pid))
            yield piece

    request = urllib.request.Request(
        f"{base}/sink", data=body(), method="POST", headers={"Content-Length": str(size)}
    )
    with urllib.request.urlopen(request, timeout=60) as resp:
        got = resp.read().decode()
    assert got == expected.hexdigest()
    assert (peak - before) < 20 * 1024, f"RSS grew {peak - before} KiB"


@pytest.mark.parametrize("form", ["upstream", "config"])
def test_no_watch_turns_the_file_watcher_off(tmp_path: Path, form: str) -> None:
    """``--no-watch`` is ``watch_rules: false``, over a config that says otherwise too."""
    from proxy.tools.cli import _parser  # noqa: PLC0415 (private helpers)
    from proxy.tools.run_command import _settings_from_args  # noqa: PLC0415

    config = tmp_path / "mend.yaml"
    config.write_text("watch_rules: true\nroutes: [{name: a, upstream: 'http://127.0.0.1:1'}]\n")
    given = (
        ["--upstream", "http://127.0.0.1:1"] if form == "upstream" else ["--config", str(config)]
    )
    for flags, watching in (([], True), (["--no-watch"], False)):
        settings, _ = _settings_from_args(_parser().parse_args(["run", *given, *flags]))
        assert settings.watch_rules is watching


@pytest.mark.parametrize(
    ("flags", "attempts"), [([], 2), (["--retries", "1"], 1), (["--retries", "4"], 4)]
)
def test_retries_flag_sets_the_route_s_tries(flags: list[str], attempts: int) -> None:
    """``--retries N`` is the single route's ``retries: {attempts: N}`` (docs/retries.md); 1 turns
    retries off, and without the flag the top-level default stands."""
    from proxy.tools.cli import _parser  # noqa: PLC0415 (private helpers)
    from proxy.tools.run_command import _settings_from_args  # noqa: PLC0415

    args = _parser().parse_args(["run", "--upstream", "http://127.0.0.1:1", *flags])
    settings, _ = _settings_from_args(args)
    route = settings.routes[0]
    assert (route.retries or settings.retries).attempts == attempts


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (["--upstream", "http://127.0.0.1:1", "--retries", "0"], "--retries: Input should be"),
        (["--config", "CONFIG", "--retries", "3"], "--retries: not with --config"),
    ],
)
def test_retries_flag_problems_are_named(tmp_path: Path, given: list[str], said: str) -> None:
    """Out of range, or with ``--config`` (whose routes say their own), the flag is refused."""
    config = tmp_path / "mend.yaml"
    config.write_text("routes: [{name: a, upstream: 'http://127.0.0.1:1'}]\n")
    argv = [str(config) if part == "CONFIG" else part for part in given]
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "run", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 2
    assert f"mend: error: {said}" in done.stderr
