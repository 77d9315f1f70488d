"""Hot reload: rule edits take effect under load, and a bad file never replaces good rules."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from proxy.config.route import Route
from proxy.config.settings import Settings
from proxy.observation.logs import make_logger
from proxy.policy.rules.ruleengine import RuleStore
from proxy.runtime.admin import create_admin_app
from proxy.runtime.app import create_app
from proxy.runtime.watch import RuleWatcher
from tests.conftest import MendTestServer

ROOT = Path(__file__).resolve().parents[2]
ServerFactory = Callable[..., Awaitable[TestServer]]
ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]

BAD_VERSIONS = {
    "yaml syntax": (
        "rules:\n  - id: t.teapot\n    when: {status: [418\n",
        3,
    ),  # the unclosed bracket opens on line 3
    "schema": (
        "rules:\n  - id: t.teapot\n    when: {status: 418}\n"
        "    envelope: {code: not_snake, category: validation}\n",
        4,
    ),
}


def rule_text(code: str) -> str:
    return (
        "rules:\n  - id: t.teapot\n    when: {status: 418}\n"
        f"    envelope: {{code: {code}, category: validation}}\n"
    )


async def teapot(_: web.Request) -> web.Response:
    return web.json_response({"error": "short and stout"}, status=418)


@dataclass
class Load:
    """Clients sending requests back to back; every answer and every failure is recorded."""

    url: str
    codes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def client(self) -> None:
        async with aiohttp.ClientSession() as session:
            while not self.stop.is_set():
                try:
                    async with session.get(self.url) as response:
                        body = await response.json()
                        code = response.headers.get("X-Error-Code", "")
                        if response.status != 418 or body["error"]["code"] != code:
                            self.failures.append(f"{response.status} {code}")
                        self.codes.append(code)
                except (aiohttp.ClientError, ValueError, KeyError) as exc:
                    self.failures.append(repr(exc))

    async def until(self, code: str) -> None:
        """Wait until a response sent from now on carries ``code``."""
        start = len(self.codes)
        await eventually(lambda: code in self.codes[start:])


def metric(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def eventually(
    predicate: Callable[[], bool | Awaitable[bool]], seconds: float = 10.0, pause: float = 0.01
) -> None:
    """Poll ``predicate`` until it holds; fail the test after ``seconds``."""
    for _ in range(int(seconds / pause)):
        result = predicate()
        if await result if not isinstance(result, bool) else result:
            return
        await asyncio.sleep(pause)
    raise AssertionError(f"still not true after {seconds} s")


@dataclass
class Running:
    rules: Path
    registry: CollectorRegistry
    log: io.StringIO
    proxy_url: str
    admin_url: str
    store: RuleStore

    def rejections(self) -> list[dict[str, Any]]:
        lines = [json.loads(x) for x in self.log.getvalue().splitlines() if x.strip()]
        return [x for x in lines if x.get("event") == "rules_reload_rejected"]


@pytest.fixture
async def running(
    aiohttp_server: ServerFactory, aiohttp_client: ClientFactory, tmp_path: Path
) -> Running:
    """A real mend (agent and admin ports on loopback) in front of a real 418 upstream."""
    upstream_app = web.Application()
    upstream_app.router.add_get("/{tail:.*}", teapot)
    upstream = await aiohttp_server(upstream_app)
    rules = tmp_path / "teapot.yaml"
    rules.write_text(rule_text("TEAPOT_V1"))
    route = Route(name="default", upstream=str(upstream.make_url("/")).rstrip("/"))
    settings = Settings(routes=(route,), rules=(rules,), default_packs=False)
    registry, log = CollectorRegistry(), io.StringIO()
    logger = make_logger(log)
    server = create_app(settings, registry, logger=logger)
    proxy = (await aiohttp_client(MendTestServer(server))).server
    admin = await aiohttp_server(create_admin_app(server.proxy.store, registry, logger))
    return Running(
        rules,
        registry,
        log,
        str(proxy.make_url("/tea")),
        str(admin.make_url("/-/reload")),
        server.proxy.store,
    )


async def test_rewrites_under_load_drop_nothing_and_bad_files_keep_the_old_rules(
    running: Running,
) -> None:
    """Good versions take effect, bad ones are rejected (logged, counted), no request fails."""
    store = running.store
    watcher = RuleWatcher(store, make_logger(running.log), interval=0.02, debounce=0.05)
    watcher.start()
    load = Load(running.proxy_url)
    clients = [asyncio.create_task(load.client()) for _ in range(4)]
    try:
        await load.until("TEAPOT_V1")
        in_force = "TEAPOT_V1"
        sequence = [
            ("good", "TEAPOT_V2"),
            ("yaml syntax", None),
            ("good", "TEAPOT_V3"),
            ("schema", None),
            ("good", "TEAPOT_V4"),
        ]
        for kind, code in sequence:
            failures = metric(running.registry, "mend_rule_reloads_total", result="failure")
            if code is not None:
                running.rules.write_text(rule_text(code))
                await load.until(code)
                in_force = code
                # the reload runs off the loop: its metrics may land just after the swap
                await eventually(
                    lambda: metric(running.registry, "mend_rules_last_reload_successful") == 1
                )
                continue
            text, line = BAD_VERSIONS[kind]
            running.rules.write_text(text)

            def rejected(before: float = failures) -> bool:
                return (
                    metric(running.registry, "mend_rule_reloads_total", result="failure") > before
                )

            await eventually(rejected)
            assert metric(running.registry, "mend_rules_last_reload_successful") == 0
            await load.until(in_force)  # the old rule still answers

            def logged(line: int = line) -> bool:
                problems = [p for r in running.rejections() for p in r["problems"]]
                return any(p.startswith(f"{running.rules}:{line}:") for p in problems)

            await eventually(logged)
    finally:
        load.stop.set()
        await asyncio.gather(*clients)
        await watcher.stop()
    assert load.failures == []
    assert len(load.codes) > 50
    assert set(load.codes) <= {"TEAPOT_V1", "TEAPOT_V2", "TEAPOT_V3", "TEAPOT_V4"}
    assert metric(running.registry, "mend_rule_reloads_total", result="failure") >= 2
    assert metric(running.registry, "mend_rules_loaded") == store.engine.rule_count


@pytest.mark.parametrize(
    ("text", "status", "code"),
    [
        (rule_text("TEAPOT_V2"), 200, "TEAPOT_V2"),
        (BAD_VERSIONS["schema"][0], 422, "TEAPOT_V1"),
        (BAD_VERSIONS["yaml syntax"][0], 422, "TEAPOT_V1"),
    ],
)
async def test_admin_reload_swaps_good_rules_and_rejects_bad_ones(
    running: Running, text: str, status: int, code: str
) -> None:
    """POST /-/reload answers 200 and applies good rules, or 422 with file:line and keeps them."""
    running.rules.write_text(text)
    async with aiohttp.ClientSession() as session:
        async with session.post(running.admin_url) as response:
            assert response.status == status
            report = await response.json()
        async with session.get(running.proxy_url) as response:
            assert response.headers["X-Error-Code"] == code
    if status == 422:
        assert report["status"] == "rejected"
        assert all(p.startswith(f"{running.rules}:") for p in report["problems"])
        assert metric(running.registry, "mend_rules_last_reload_successful") == 0
    else:
        assert report["status"] == "reloaded"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.parametrize("trigger", ["watch", "SIGHUP"])
async def test_mend_run_reloads_on_file_change_and_on_sighup(
    aiohttp_server: ServerFactory, tmp_path: Path, trigger: str
) -> None:
    """A real ``mend run`` process picks up an edited rule file by itself, or on SIGHUP."""
    upstream_app = web.Application()
    upstream_app.router.add_get("/{tail:.*}", teapot)
    upstream = await aiohttp_server(upstream_app)
    rules = tmp_path / "teapot.yaml"
    rules.write_text(rule_text("TEAPOT_V1"))
    port, admin = free_port(), free_port()
    config = tmp_path / "mend.yaml"
    config.write_text(
        f"listen: 127.0.0.1:{port}\nadmin_listen: 127.0.0.1:{admin}\n"
        f"watch_rules: {'true' if trigger == 'watch' else 'false'}\n"
        "default_packs: false\nrules: [teapot.yaml]\n"
        f"routes:\n  - {{name: default, upstream: '{str(upstream.make_url('/')).rstrip('/')}'}}\n"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy", "run", "--config", str(config),
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/tea"

    async def code(session: aiohttp.ClientSession) -> str | None:
        try:
            async with session.get(url) as response:
                return response.headers.get("X-Error-Code")
        except aiohttp.ClientError:
            return None

    async def until(session: aiohttp.ClientSession, wanted: str) -> None:
        async def check() -> bool:
            return await code(session) == wanted

        await eventually(check, seconds=15, pause=0.05)

    try:
        async with aiohttp.ClientSession() as session:
            await until(session, "TEAPOT_V1")
            rules.write_text(rule_text("TEAPOT_V2"))
            if trigger == "SIGHUP":
                await asyncio.sleep(1.5)  # no watcher: nothing changes by itself
                assert await code(session) == "TEAPOT_V1"
                os.kill(process.pid, signal.SIGHUP)
            await until(session, "TEAPOT_V2")
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(process.communicate(), 15)
    assert process.returncode == 0, err.decode()
