"""Safe by default (issue 25): ``mend run --upstream`` in front of real upstreams (httpbin served by
gunicorn, nginx) changes nothing that works direct."""

from __future__ import annotations

import asyncio
import http.client
import json
import resource
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"port {port} did not open in {timeout} s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@dataclass
class Running:
    proc: subprocess.Popen[bytes]
    port: int
    admin: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/metrics", timeout=5) as r:
            text = r.read().decode()
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(name) and not line.startswith("#")
        )


def mend_run(upstream: str, log: Path, *extra: str, nofile: int | None = None) -> Running:
    """``mend run --upstream URL``, on free ports (the only other flags); ``nofile`` lowers its
    file limit right after it starts, as ``ulimit -n`` would."""
    port, admin = free_port(), free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "proxy",
                "run",
                "--upstream",
                upstream,
                "--listen",
                f"127.0.0.1:{port}",
                "--admin-listen",
                f"127.0.0.1:{admin}",
                *extra,
            ],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    if nofile is not None:
        resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (nofile, nofile))
    try:
        wait_port(admin, proc)
        wait_port(port, proc)
    except AssertionError:
        stop(proc)
        raise
    return Running(proc, port, admin, log)


@pytest.fixture(scope="module")
def httpbin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """httpbin 0.10.4 from PyPI, served by gunicorn (threads, so /drip does not block others)."""
    port = free_port()
    log = tmp_path_factory.mktemp("httpbin") / "gunicorn.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "-b",
                f"127.0.0.1:{port}",
                "-k",
                "gthread",
                "--threads",
                "16",
                "httpbin:app",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        wait_port(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def via_mend(httpbin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = mend_run(httpbin, tmp_path_factory.mktemp("mend") / "mend.log")
    try:
        yield running
    finally:
        stop(running.proc)


def get(
    base: str, path: str, headers: dict[str, str] | None = None
) -> tuple[int, bytes, dict[str, str]]:
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read(), {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()


def first_byte_s(base: str, path: str) -> float:
    """Seconds from sending the request to the first byte of the body."""
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        began = time.monotonic()
        conn.request("GET", path)
        resp = conn.getresponse()
        assert resp.read(1)
        took = time.monotonic() - began
        resp.read()
        return took
    finally:
        conn.close()


# --- pass-through bodies -------------------------------------------------------------------


def test_drip_first_byte_arrives_as_fast_as_direct(httpbin: str, via_mend: Running) -> None:
    """httpbin's /drip (a Content-Length under 64 KiB, one byte every 0.5 s): the first byte
    comes through mend within 0.3 s of direct, not after the whole body."""
    path = "/drip?duration=2&numbytes=4&code=200"
    direct = first_byte_s(httpbin, path)
    proxied = first_byte_s(via_mend.url, path)
    assert direct < 0.4
    assert proxied < direct + 0.3


def test_agent_hanging_up_mid_stream_is_a_499(via_mend: Running) -> None:
    """An agent that leaves a /drip after its first byte is logged 499 ``client_closed``, not
    as a broken upstream stream passed through."""
    with socket.create_connection(("127.0.0.1", via_mend.port), timeout=5) as sock:
        sock.sendall(b"GET /drip?duration=1&numbytes=4 HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 200")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        lines = [
            json.loads(line)
            for line in via_mend.log.read_text(errors="replace").splitlines()
            if line.startswith("{")
        ]
        mine = [x for x in lines if x.get("event") == "request" and x.get("status") == 499]
        if mine:
            assert mine[0]["outcome"] == "client_closed"
            assert not [x for x in lines if x.get("event") == "upstream_stream_broken"]
            return
        time.sleep(0.1)
    raise AssertionError("no 499 logged")


# --- redirects -------------------------------------------------------------------------------


def test_absolute_redirect_names_mend(httpbin: str, via_mend: Running) -> None:
    """httpbin's /absolute-redirect names the address it was reached at; through mend the agent
    gets mend's, and following it stays behind mend."""
    status, _, headers = get(via_mend.url, "/absolute-redirect/1")
    assert status == 302
    assert headers["location"] == f"{via_mend.url}/get"
    _, _, direct_headers = get(httpbin, "/absolute-redirect/1")
    assert direct_headers["location"] == f"{httpbin}/get"  # what it did direct
    status, body, _ = get(via_mend.url, "/get")
    assert status == 200
    assert json.loads(body)["url"].endswith("/get")


def test_redirect_elsewhere_is_unchanged(via_mend: Running) -> None:
    """A redirect to another origin passes as sent."""
    _, _, headers = get(via_mend.url, "/redirect-to?url=http%3A%2F%2Fexample.org%2Fx")
    assert headers["location"] == "http://example.org/x"


# --- circuit ---------------------------------------------------------------------------------


def test_failing_endpoint_leaves_the_others_untouched(via_mend: Running) -> None:
    """Ten 503s from /status/503, then /get, /status/404 and /status/503 again: every answer is
    the upstream's own (no circuit answers by default)."""
    for _ in range(10):
        status, body, _ = get(via_mend.url, "/status/503")
        assert status == 503
        assert json.loads(body)["error"]["rule"] != "proxy.upstream_unavailable"
    assert get(via_mend.url, "/get")[0] == 200
    assert get(via_mend.url, "/status/404")[0] == 404
    status, body, _ = get(via_mend.url, "/status/503")
    assert json.loads(body)["error"]["upstream_status"] == 503


NGINX_503 = """daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location / {{ add_header Retry-After 120 always; return 503; }}
    }}
}}
"""


@pytest.fixture(scope="module")
def nginx_busy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """nginx answering every request ``503`` with ``Retry-After: 120``."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        pytest.skip("nginx is not installed (scripts/install-system-deps installs it)")
    directory = tmp_path_factory.mktemp("nginx")
    port = free_port()
    conf = directory / "nginx.conf"
    conf.write_text(NGINX_503.format(dir=directory, port=port), encoding="utf-8")
    proc = subprocess.Popen(
        [nginx, "-c", str(conf), "-p", str(directory), "-e", str(directory / "error.log")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    try:
        wait_port(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


def test_retry_after_survives(nginx_busy: str, tmp_path: Path) -> None:
    """nginx's 503 with ``Retry-After: 120``, eight times: each envelope keeps the 120 s and the
    503's own code; none is a circuit's answer."""
    running = mend_run(nginx_busy, tmp_path / "mend.log")
    try:
        for _ in range(8):
            status, body, headers = get(running.url, "/api/orders")
            error = json.loads(body)["error"]
            assert status == 503
            assert headers["retry-after"] == "120"
            assert error["retry_after_ms"] == 120_000
            assert error["code"] != "UPSTREAM_UNAVAILABLE"
            assert error["upstream_status"] == 503
    finally:
        stop(running.proc)


# --- operator files --------------------------------------------------------------------------

RULE = """rules:
  - id: mine.teapot
    when: {status: 418}
    envelope: {code: TEAPOT, category: internal, message: A teapot.}
"""


def test_rule_file_over_the_cap_is_refused_at_start(httpbin: str, tmp_path: Path) -> None:
    """A 100 MB rule file: ``mend run`` exits 2 at once with one ``file:1:`` line naming the cap,
    without reading it."""
    big = tmp_path / "big.yaml"
    with big.open("wb") as handle:
        handle.truncate(100 << 20)  # sparse: 100 MB by stat, nothing on disk
    began = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "proxy", "run", "--upstream", httpbin, "--rules", str(big)],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert time.monotonic() - began < 30
    lines = result.stderr.decode().strip().splitlines()
    assert lines[-1].startswith(f"mend: error: {big}:1: cannot read: 104,857,600 bytes")
    assert "max_file_bytes (8,388,608)" in lines[-1]


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    import os  # noqa: PLC0415

    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_log(log: Path, event: str, timeout: float = 30.0) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("{") and json.loads(line).get("event") == event:
                found: dict[str, object] = json.loads(line)
                return found
        time.sleep(0.1)
    raise AssertionError(f"no {event} in {log.read_text(errors='replace')[-2000:]}")


@pytest.mark.slow  # about 16 s: a reload, then 8 s of idle measured
def test_big_files_in_the_rules_directory_cost_no_idle_cpu(httpbin: str, tmp_path: Path) -> None:
    """A 100 MB file and a 7 MB one dropped into a watched rules directory: the reload is
    refused with a ``file:1:`` line, the rule in force keeps working, and the idle watcher
    then uses under 3 % of a core (it read and summed every file on every poll)."""
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "mine.yaml").write_text(RULE, encoding="utf-8")
    running = mend_run(httpbin, tmp_path / "mend.log", "--rules", str(rules))
    try:
        with (rules / "huge.yaml").open("wb") as handle:
            handle.truncate(100 << 20)
        (rules / "large.yaml").write_bytes(b"rules: [\n" + b"#" * (7 << 20))
        rejected = _wait_log(running.log, "rules_reload_rejected")
        problems = "\n".join(map(str, rejected["problems"]))  # type: ignore[call-overload]
        assert f"{rules / 'huge.yaml'}:1: cannot read: 104,857,600 bytes" in problems
        _, body, _ = get(running.url, "/status/418")
        assert json.loads(body)["error"]["code"] == "TEAPOT"
        time.sleep(3)  # past the watcher's freshness window
        before = _cpu_s(running.proc.pid)
        time.sleep(5)
        assert _cpu_s(running.proc.pid) - before < 0.15
    finally:
        stop(running.proc)


# --- connections -----------------------------------------------------------------------------


def _whole_response(sock: socket.socket) -> bytes:
    """One response with a Content-Length, read to its last byte: the connection is then idle."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "closed before the response head"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "closed before the end of the body"
        body += chunk
    return head + b"\r\n\r\n" + body


def test_new_client_gets_in_when_idle_keep_alives_fill_the_cap(
    httpbin: str, tmp_path: Path
) -> None:
    """Under ``ulimit -n 64`` the cap is 16: sixteen keep-alive clients that got their answer
    and stay idle hold it, and a seventeenth is served (the longest-idle one is closed for it)."""
    running = mend_run(httpbin, tmp_path / "mend.log", nofile=64)
    held: list[socket.socket] = []
    try:
        lowered = _wait_log(running.log, "max_connections_lowered")
        cap = int(str(lowered["max_connections"]))
        for _ in range(cap):
            sock = socket.create_connection(("127.0.0.1", running.port), timeout=10)
            sock.sendall(b"GET /get HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _whole_response(sock).startswith(b"HTTP/1.1 200")
            held.append(sock)
        status, body, _ = get(running.url, "/get")
        assert status == 200, body
        assert running.metric("mend_idle_connections_closed_total") >= 1
        held[0].settimeout(5)
        assert held[0].recv(1) == b""  # the longest idle made room
    finally:
        for sock in held:
            sock.close()
        stop(running.proc)


# --- a replay of the held-out corpus ---------------------------------------------------------


def _envelopes(document: object) -> Iterator[dict[str, object]]:
    """Every envelope in an answer: the JSON one, or inside a JSON-RPC error or GraphQL entry."""
    if isinstance(document, dict):
        if "rule" in document and "upstream_status" in document:
            yield document
            return
        for value in document.values():
            yield from _envelopes(value)
    elif isinstance(document, list):
        for value in document:
            yield from _envelopes(value)


def _heldout() -> list[dict[str, Any]]:
    from tests.policy.rules.test_heldout import _load  # noqa: PLC0415

    cases = [c for c in _load() if "response" in c]
    # outages come in runs: the 5xx first, then the 4xx, then the successes
    return sorted(cases, key=lambda c: -int(c["response"]["status"]))


def test_heldout_replay_keeps_every_answer(tmp_path: Path) -> None:
    """Every response of the held-out corpus (hundreds of real error bodies and successes, the
    5xx first: dozens of 502/503/504 in a row, as in an outage) through one ``mend run
    --upstream``: no answer is a circuit's, each error keeps its upstream status, each success
    passes byte for byte."""
    from proxy.tools.ruletest.cases import ResponseSpec  # noqa: PLC0415
    from tests.hostile.procs import raw_server, read_head  # noqa: PLC0415

    cases = _heldout()
    canned: list[tuple[int, bytes, dict[str, str]]] = []
    for case in cases:
        spec = ResponseSpec.model_validate(case["response"])
        body, headers = spec.raw()
        canned.append((spec.status, body, headers))

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = (await read_head(reader)).decode("latin-1").lower()
            index = int(head.split("x-case: ", 1)[1].split("\r\n", 1)[0])
            status, body, headers = canned[index]
            lines = [f"HTTP/1.1 {status} X"]
            lines += [f"{k}: {v}" for k, v in headers.items() if k.lower() != "content-length"]
            lines.append(f"Content-Length: {len(body)}")
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
            await writer.drain()

    with raw_server(upstream) as server:
        running = mend_run(f"http://127.0.0.1:{server.port}", tmp_path / "mend.log")
        try:
            host, port = "127.0.0.1", running.port
            conn = http.client.HTTPConnection(host, port, timeout=10)
            circuit_answers, wrong = 0, []
            for index, case in enumerate(cases):
                request = case.get("request") or {}
                assert isinstance(request, dict)
                conn.request(
                    str(request.get("method", "GET")),
                    str(request.get("path", "/")),
                    headers={"X-Case": str(index)},
                )
                resp = conn.getresponse()
                body = resp.read()
                status, sent, _ = canned[index]
                if status < 400:
                    if (resp.status, body) != (status, sent):
                        wrong.append(case["id"])
                    continue
                envelopes = list(_envelopes(json.loads(body)))
                circuit_answers += any(e["rule"] == "proxy.upstream_unavailable" for e in envelopes)
                if not envelopes or any(e["upstream_status"] != status for e in envelopes):
                    wrong.append(case["id"])
        finally:
            stop(running.proc)
    assert len(cases) > 200
    assert sum(1 for s, _, _ in canned if s in (502, 503, 504)) > 20
    assert circuit_answers == 0
    assert wrong == []
