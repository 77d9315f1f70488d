"""End to end: real mend, real upstreams, real Prometheus scraping mend's admin port.

Every Grafana panel query and every alert expression is evaluated by that Prometheus: each must
be valid PromQL over the metrics mend really exports, and each panel must show data after a
varied mix of traffic (passthrough, matched and unmatched errors, retryable errors, a secret to
redact, repeats, an unreachable upstream, an upstream timeout, a broken upstream).

Needs the `prometheus` binary (scripts/install-system-deps); skips without it outside CI.
If mend itself does not start, the tests fail: that is a bug, not a missing tool.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "grafana" / "dashboards" / "mend.json"
ALERTS = REPO / "prometheus" / "alerts.yml"

SCRAPE_S = 1.0
# What Grafana would put in for these variables on a 30-minute dashboard. $__rate_interval is
# at least four scrape intervals; 1m is comfortably more, and covers the whole test run.
GRAFANA_VARS = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "5m",
    "$route": ".*",
    "${datasource}": "prometheus",
}


def grafana_expand(expr: str) -> str:
    # longest names first: $__range must not eat the start of $__range_s
    for name in sorted(GRAFANA_VARS, key=len, reverse=True):
        expr = expr.replace(name, GRAFANA_VARS[name])
    assert "$" not in expr, f"unexpanded variable in {expr}"
    return expr


def dashboard_targets() -> list[tuple[str, str]]:
    with DASHBOARD.open(encoding="utf-8") as f:
        dash = json.load(f)
    out = []
    for panel in dash["panels"]:
        for p in [panel, *panel.get("panels", [])]:
            for target in p.get("targets", []):
                out.append((f"{p['title']} [{target['refId']}]", target["expr"]))
    return out


def alert_exprs() -> list[tuple[str, str]]:
    with ALERTS.open(encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    return [(r["alert"], r["expr"]) for g in doc["groups"] for r in g["rules"] if "alert" in r]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_for(
    what: str,
    check: Any,
    timeout: float,
    proc: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            output = log.read_text(errors="replace")[-4000:] if log else ""
            pytest.fail(f"{what}: process exited with {proc.returncode}\n{output}")
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.2)
    output = log.read_text(errors="replace")[-4000:] if log else ""
    pytest.fail(f"{what}: not ready after {timeout}s\n{output}")


# --- the upstreams -------------------------------------------------------------------------------

LEAKY_BODY = {
    "message": "Lookup failed: password=hunter2 for postgres://app:s3cret@db.internal:5432/orders",
    "error": "token=ghp_abcdefghijklmnopqrstuvwxyz0123456789 rejected",
    "trace": 'Traceback (most recent call last):\n  File "/srv/app/orders.py", line 42, in get',
}


async def ok(_: web.Request) -> web.Response:
    return web.json_response({"id": 1, "qty": 3})


async def validation(_: web.Request) -> web.Response:
    body = {
        "detail": [
            {
                "loc": ["body", "qty"],
                "msg": "Input should be greater than 0",
                "type": "greater_than",
                "input": -1,
                "ctx": {"gt": 0},
            }
        ]
    }
    return web.json_response(body, status=422)


async def teapot(_: web.Request) -> web.Response:
    # nothing any rule pack knows: only the 4xx fallback matches
    return web.Response(status=418, text="short and stout")


async def leak(_: web.Request) -> web.Response:
    return web.json_response(LEAKY_BODY, status=500)


async def bad_key(_: web.Request) -> web.Response:
    # a 4xx whose message reaches the envelope, so its secret must be cut there
    return web.json_response(
        {"message": "Invalid api_key=sk_live_abcdefgh12345678 for this tenant"},
        status=400,
        headers={"WWW-Authenticate": 'Bearer error="invalid_token", token=eyJhbGciOi.abc'},
    )


async def limited(_: web.Request) -> web.Response:
    return web.json_response(
        {"message": "Too many requests"}, status=429, headers={"Retry-After": "1"}
    )


async def missing(_: web.Request) -> web.Response:
    return web.json_response({"message": "Order 9 not found"}, status=404)


async def unavailable(_: web.Request) -> web.Response:
    return web.json_response({"message": "maintenance"}, status=503)


async def slow(_: web.Request) -> web.Response:
    await asyncio.sleep(2)
    return web.json_response({"late": True})


async def drip(request: web.Request) -> web.StreamResponse:
    """Four bytes over two seconds, with a Content-Length: a slow stream, not slow mend."""
    response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
    response.content_length = 4
    await response.prepare(request)
    for _ in range(4):
        await response.write(b"*")
        await asyncio.sleep(0.5)
    await response.write_eof()
    return response


async def echo(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    async for message in ws:
        await ws.send_str(message.data)
    return ws


async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers any request with bytes that are not HTTP."""
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"SMTP READY\r\n\r\n")
    await writer.drain()
    writer.close()


@dataclass
class Upstreams:
    http_port: int
    garbage_port: int
    dead_port: int


class UpstreamThread:
    """A real aiohttp upstream (and a non-HTTP one) on their own event loop in a thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.stopped = threading.Event()
        self.ports: tuple[int, int] = (0, 0)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_get("/ok", ok)
        app.router.add_post("/orders", validation)
        app.router.add_get("/teapot", teapot)
        app.router.add_get("/leak", leak)
        app.router.add_get("/limited", limited)
        app.router.add_get("/bad-key", bad_key)
        app.router.add_get("/orders/9", missing)
        app.router.add_get("/maintenance", unavailable)
        app.router.add_get("/slow/thing", slow)
        app.router.add_get("/drip", drip)
        app.router.add_get("/echo", echo)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        raw = await asyncio.start_server(garbage, "127.0.0.1", 0)
        http_port = runner.addresses[0][1]
        self.ports = (http_port, raw.sockets[0].getsockname()[1])
        self.ready.set()
        self._stop = asyncio.Event()
        await self._stop.wait()
        raw.close()
        await runner.cleanup()

    def __enter__(self) -> tuple[int, int]:
        self.thread.start()
        assert self.ready.wait(10), "upstream did not start"
        return self.ports

    def __exit__(self, *_: object) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(10)


# --- mend and Prometheus -------------------------------------------------------------------------


@dataclass
class Stack:
    mend: str
    admin: str
    prometheus: str


def mend_config(path: Path, up: Upstreams) -> None:
    local = "http://127.0.0.1"
    path.write_text(
        yaml.safe_dump(
            {
                "routes": [
                    {
                        "name": "dead",
                        "prefix": "/dead",
                        "upstream": f"{local}:{up.dead_port}",
                        "strip_prefix": True,
                        "connect_timeout": 1.0,
                    },
                    {
                        "name": "broken",
                        "prefix": "/broken",
                        "upstream": f"{local}:{up.garbage_port}",
                        "strip_prefix": True,
                    },
                    {
                        "name": "slow",
                        "prefix": "/slow",
                        "upstream": f"{local}:{up.http_port}",
                        "read_timeout": 0.3,
                    },
                    {
                        "name": "stream",
                        "prefix": "/stream",
                        "upstream": f"{local}:{up.http_port}",
                        "strip_prefix": True,
                    },
                    {
                        "name": "ws",
                        "prefix": "/ws",
                        "upstream": f"{local}:{up.http_port}",
                        "strip_prefix": True,
                    },
                    {"name": "api", "prefix": "/", "upstream": f"{local}:{up.http_port}"},
                ],
                # circuits are opt-in; on here so the circuit panel shows them: unreachable and
                # timed out upstreams open theirs (per operation), 503s do not count
                "circuit": {"failures": 5, "statuses": [502, 504]},
            }
        ),
        encoding="utf-8",
    )


def prometheus_config(path: Path, admin: str) -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "global": {
                    "scrape_interval": f"{SCRAPE_S:g}s",
                    "evaluation_interval": f"{SCRAPE_S:g}s",
                },
                "rule_files": [str(ALERTS)],
                "scrape_configs": [{"job_name": "mend", "static_configs": [{"targets": [admin]}]}],
            }
        ),
        encoding="utf-8",
    )


# (method, path, body, times): every kind of traffic the dashboard has a panel for
TRAFFIC: list[tuple[str, str, dict[str, Any] | None, int]] = [
    ("GET", "/ok", None, 60),  # passthrough
    ("POST", "/orders", {"qty": -1}, 40),  # matched validation error, repeated
    ("GET", "/teapot", None, 30),  # unmatched: fallback only
    ("GET", "/leak", None, 30),  # upstream 5xx, secrets and a trace in it
    ("GET", "/bad-key", None, 20),  # a secret in the message and a header
    ("GET", "/limited", None, 30),  # retryable
    ("GET", "/orders/9", None, 20),  # not found
    ("GET", "/maintenance", None, 20),  # 503
    ("GET", "/dead/x", None, 15),  # unreachable upstream
    ("GET", "/broken/x", None, 15),  # not HTTP: protocol error
    ("GET", "/slow/thing", None, 6),  # read timeout
    ("GET", "/stream/drip", None, 6),  # a slow stream (2 s), passed through
]


async def send_traffic(base: str) -> dict[int, int]:
    statuses: dict[int, int] = {}
    sem = asyncio.Semaphore(16)
    timeout = aiohttp.ClientTimeout(total=15)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def one(method: str, path: str, body: dict[str, Any] | None) -> None:
            async with sem, session.request(method, base + path, json=body) as resp:
                await resp.read()
                statuses[resp.status] = statuses.get(resp.status, 0) + 1

        async def abandoned() -> None:
            # the agent hangs up after the first byte of a slow stream: 499, client_closed
            async with sem, session.get(base + "/stream/drip") as resp:
                await resp.content.readexactly(1)
                resp.close()

        async def websocket() -> None:
            async with sem, session.ws_connect(base + "/ws/echo") as ws:
                await ws.send_str("hi")
                assert (await ws.receive(timeout=5)).data == "hi"

        await asyncio.gather(
            *(one(m, p, b) for m, p, b, n in TRAFFIC for _ in range(n)),
            *(abandoned() for _ in range(4)),
            *(websocket() for _ in range(6)),
        )
    return statuses


def prom_query(prom: str, expr: str) -> dict[str, Any]:
    url = f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    status, body = http_get(url)
    data: dict[str, Any] = json.loads(body)
    data["http_status"] = status
    return data


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        reason = "prometheus is not installed; run scripts/install-system-deps as root"
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI must install it)")
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("e2e")
    procs: list[subprocess.Popen[bytes]] = []
    with UpstreamThread() as (http_port, garbage_port):
        try:
            up = Upstreams(http_port, garbage_port, free_port())
            mend_config(tmp / "mend.yaml", up)
            listen, admin = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
            mend_log = tmp / "mend.log"
            with mend_log.open("wb") as out:
                mend = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "proxy",
                        "run",
                        "--config",
                        str(tmp / "mend.yaml"),
                        "--listen",
                        listen,
                        "--admin-listen",
                        admin,
                    ],
                    cwd=REPO,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            procs.append(mend)
            wait_for(
                "mend /readyz",
                lambda: http_get(f"http://{admin}/readyz")[0] == 200,
                30,
                mend,
                mend_log,
            )

            prom_addr = f"127.0.0.1:{free_port()}"
            prometheus_config(tmp / "prometheus.yml", admin)
            prom_log = tmp / "prometheus.log"
            with prom_log.open("wb") as out:
                prom = subprocess.Popen(
                    [
                        prometheus,
                        f"--config.file={tmp / 'prometheus.yml'}",
                        f"--storage.tsdb.path={tmp / 'tsdb'}",
                        f"--web.listen-address={prom_addr}",
                        "--storage.tsdb.retention.time=1h",
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            procs.append(prom)
            prom_url = f"http://{prom_addr}"
            wait_for(
                "prometheus ready",
                lambda: http_get(f"{prom_url}/-/ready")[0] == 200,
                60,
                prom,
                prom_log,
            )

            def scraped() -> bool:
                result = prom_query(prom_url, 'up{job="mend"} == 1')["data"]["result"]
                return bool(result)

            wait_for("prometheus scraping mend", scraped, 30, prom, prom_log)
            # Two rounds with scrapes between: a counter's first sample is not an increase, so
            # rate() over counters born in round one only shows round two.
            for _ in range(2):
                statuses = asyncio.run(send_traffic(f"http://{listen}"))
                time.sleep(3 * SCRAPE_S)
            # a reload through the admin API, so the reload panels show a real reload too
            reload_req = urllib.request.Request(f"http://{admin}/-/reload", method="POST")
            with urllib.request.urlopen(reload_req, timeout=10) as resp:
                assert resp.status == 200
            time.sleep(3 * SCRAPE_S)
            assert statuses.get(200), f"no passthrough: {statuses}"
            yield Stack(f"http://{listen}", f"http://{admin}", prom_url)
        finally:
            for proc in reversed(procs):
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


@pytest.mark.parametrize(
    ("title", "expr"), dashboard_targets(), ids=[t for t, _ in dashboard_targets()]
)
def test_dashboard_query_returns_data(stack: Stack, title: str, expr: str) -> None:
    """A dashboard panel's query is valid PromQL and shows data after varied traffic."""
    answer = prom_query(stack.prometheus, grafana_expand(expr))
    assert answer["status"] == "success", answer
    assert answer["data"]["result"], f"{title}: no data for {grafana_expand(expr)}"


def _panel(title: str, ref: str = "A") -> str:
    return dict(dashboard_targets())[f"{title} [{ref}]"]


def _value(stack: Stack, expr: str, route: str) -> float:
    answer = prom_query(stack.prometheus, grafana_expand(expr.replace("$route", route)))
    assert answer["status"] == "success", answer
    (series,) = answer["data"]["result"]
    return float(series["value"][1])


def test_proxy_overhead_leaves_out_a_slow_stream(stack: Stack) -> None:
    """On the route serving only 2 s drips (and hang-ups), "Proxy overhead" is mend's own
    milliseconds, not the 2 s the body took to stream (request minus upstream time said 2 s)."""
    expr = _panel("Proxy overhead")
    request_mean = (
        'sum(rate(mend_request_duration_seconds_sum{route=~"$route"}[$__rate_interval])) / '
        'sum(rate(mend_request_duration_seconds_count{route=~"$route"}[$__rate_interval]))'
    )
    assert _value(stack, request_mean, "stream") > 1.0  # the streams were slow
    assert _value(stack, expr, "stream") < 0.1
    assert _value(stack, _panel("Proxy overhead", "B"), "stream") < 0.25


def test_error_share_leaves_out_websockets_and_hang_ups(stack: Stack) -> None:
    """Routes with only WebSocket sessions, passed-through streams and agents that hung up
    have an error share of 0; the mixed api route's is above 0."""
    expr = _panel("Error share")
    for outcome in ("client_closed", "websocket"):  # the traffic had both
        count = f'sum(increase(mend_requests_total{{outcome="{outcome}"}}[5m]))'
        assert _value(stack, count, "") > 0, outcome
    assert _value(stack, expr, "stream|ws") == 0.0
    assert _value(stack, expr, "api") > 0.3


@pytest.mark.parametrize(("alert", "expr"), alert_exprs(), ids=[a for a, _ in alert_exprs()])
def test_alert_expression_is_valid(stack: Stack, alert: str, expr: str) -> None:
    """An alert expression is accepted and evaluated over mend's real series."""
    answer = prom_query(stack.prometheus, expr)
    assert answer["status"] == "success", answer


def test_alert_rules_are_loaded_and_healthy(stack: Stack) -> None:
    """Prometheus loaded every alert from prometheus/alerts.yml and evaluates each without error."""
    expected = {a for a, _ in alert_exprs()}

    def rules() -> dict[str, dict[str, Any]]:
        _, body = http_get(f"{stack.prometheus}/api/v1/rules?type=alert")
        groups = json.loads(body)["data"]["groups"]
        return {r["name"]: r for g in groups for r in g["rules"]}

    deadline = time.monotonic() + 10
    loaded = rules()
    while time.monotonic() < deadline and any(r["health"] == "unknown" for r in loaded.values()):
        time.sleep(SCRAPE_S)
        loaded = rules()
    assert set(loaded) == expected
    for name, rule in loaded.items():
        assert rule["health"] == "ok", f"{name}: {rule.get('lastError')}"


@pytest.mark.parametrize(
    ("metric", "labels"),
    [
        ("mend_upstream_failures_total", {"reason": "unreachable", "route": "dead"}),
        ("mend_upstream_failures_total", {"reason": "timeout", "route": "slow"}),
        ("mend_upstream_failures_total", {"reason": "protocol_error", "route": "broken"}),
        ("mend_unmatched_errors_total", {"upstream_status": "418", "route": "api"}),
        ("mend_error_actions_total", {"action": "retry"}),
        ("mend_error_repeats_total", {"route": "api"}),
        ("mend_redactions_total", {}),
        ("mend_rule_reloads_total", {"result": "success"}),
    ],
    ids=lambda v: v if isinstance(v, str) else ",".join(f"{k}={x}" for k, x in v.items()),
)
def test_traffic_produced_series(stack: Stack, metric: str, labels: dict[str, str]) -> None:
    """The traffic mix really exercised each path the dashboard shows (not just any series)."""
    selector = ",".join(f'{k}="{v}"' for k, v in labels.items())
    answer = prom_query(stack.prometheus, f"sum({metric}{{{selector}}}) > 0")
    assert answer["data"]["result"], f"no {metric}{{{selector}}}"


def test_grafana_variable_expansion() -> None:
    """Every variable the dashboard uses is expanded, so a query never reaches Prometheus raw."""
    for _, expr in dashboard_targets():
        assert not re.search(r"\$\w", grafana_expand(expr))


# --- the compose stack's own commands, run without Docker ----------------------------------------

COMPOSE = REPO / "docker-compose.yml"
DOCKERFILE_ENTRYPOINT = ["mend"]


def compose_argv(argv: list[str], ports: dict[str, int]) -> list[str]:
    """A compose command or healthcheck, rewritten to run here: this Python, this checkout,
    loopback addresses and free ports instead of service names and fixed ports."""
    api, mend, admin = ports["legacy-api"], ports["mend"], ports["admin"]
    swaps = [
        ("http://legacy-api:9000", f"http://127.0.0.1:{api}"),
        ("http://mend:8080", f"http://127.0.0.1:{mend}"),
        ("('mend', 8080)", f"('127.0.0.1', {mend})"),
        ("0.0.0.0:8080", f"127.0.0.1:{mend}"),
        ("0.0.0.0:9464", f"127.0.0.1:{admin}"),
        ("127.0.0.1:9464", f"127.0.0.1:{admin}"),
        ("127.0.0.1:9000", f"127.0.0.1:{api}"),
        ("/app/", f"{REPO}/"),
    ]
    out = []
    for arg in argv:
        swapped = arg
        for old, new in swaps:
            swapped = swapped.replace(old, new)
        out.append({"0.0.0.0": "127.0.0.1", "9000": str(api)}.get(swapped, swapped))
    if out[:1] == ["mend"]:
        return [sys.executable, "-m", "proxy", *out[1:]]
    if out[:1] == ["python"]:
        return [sys.executable, *out[1:]]
    return out


def test_compose_services_run_and_pass_their_healthchecks(tmp_path: Path) -> None:
    """legacy-api, mend and agent, started from docker-compose.yml's own commands, come up,
    pass their own healthchecks, and the agent's traffic reaches mend's metrics."""
    services = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]
    ports = {"legacy-api": free_port(), "mend": free_port(), "admin": free_port()}
    procs: list[subprocess.Popen[bytes]] = []

    def healthy(name: str) -> bool:
        test = services[name]["healthcheck"]["test"]
        assert test[0] == "CMD"
        check = subprocess.run(
            compose_argv(test[1:], ports),
            cwd=REPO,
            capture_output=True,
            timeout=10,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        return check.returncode == 0

    try:
        for name in ("legacy-api", "mend", "agent"):
            service = services[name]
            argv = compose_argv(
                [*service.get("entrypoint", DOCKERFILE_ENTRYPOINT), *service["command"]], ports
            )
            log = tmp_path / f"{name}.log"
            with log.open("wb") as out:
                procs.append(
                    subprocess.Popen(
                        argv,
                        cwd=REPO,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )
            wait_for(f"{name} healthcheck", lambda n=name: healthy(n), 30, procs[-1], log)

        def agent_traffic_counted() -> bool:
            _, metrics = http_get(f"http://127.0.0.1:{ports['admin']}/metrics")
            counts = re.findall(rb"^mend_requests_total\{[^}]*\} ([0-9.e+]+)$", metrics, re.M)
            return sum(float(c) for c in counts) > 0

        wait_for(
            "agent traffic in mend_requests_total",
            agent_traffic_counted,
            30,
            procs[-1],
            tmp_path / "agent.log",
        )
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
