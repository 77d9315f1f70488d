"""Reload means the whole configuration (issue 17 §3): ``--config`` is read again by SIGHUP,
``POST /-/reload`` and the file watcher; routes, upstreams, limits and TLS change at once;
requests in flight finish on the configuration they started with; a bad config keeps the
running one, logged with ``file:line`` and counted; settings that need a restart are named."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import ssl
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from proxy.config.sources import ConfigSource
from proxy.observation.logs import make_logger
from proxy.runtime.admin import create_admin_app
from proxy.runtime.app import MendServer, create_app
from proxy.runtime.watch import RuleWatcher
from tests.conftest import MendTestServer
from tests.runtime.test_reload import eventually, free_port, metric

ROOT = Path(__file__).resolve().parents[2]
ServerFactory = Callable[..., Awaitable[TestServer]]
ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]


@dataclass
class Upstream:
    """A real upstream that says who it is, with a slow endpoint released by the test."""

    name: str
    release: asyncio.Event = field(default_factory=asyncio.Event)
    hits: int = 0
    server: TestServer | None = None

    def app(self) -> web.Application:
        async def who(_: web.Request) -> web.Response:
            self.hits += 1
            return web.json_response({"upstream": self.name})

        async def slow(_: web.Request) -> web.Response:
            await self.release.wait()
            return web.json_response({"upstream": self.name, "slow": True})

        app = web.Application()
        app.router.add_get("/slow", slow)
        app.router.add_route("*", "/{tail:.*}", who)
        return app

    @property
    def url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url("/")).rstrip("/")


async def start(name: str, aiohttp_server: ServerFactory, **kwargs: Any) -> Upstream:
    upstream = Upstream(name)
    upstream.server = await aiohttp_server(upstream.app(), **kwargs)
    return upstream


def config_text(upstream: str, *, extra: str = "", route: str = "") -> str:
    return (
        "default_packs: false\n"
        f"{extra}"
        f"routes:\n  - {{name: api, prefix: /, upstream: '{upstream}'{route}}}\n"
    )


@dataclass
class Running:
    config: Path
    mend: TestClient[Any, Any]
    server: MendServer
    registry: CollectorRegistry
    log: io.StringIO
    admin: TestServer

    def events(self, name: str) -> list[dict[str, Any]]:
        lines = [json.loads(x) for x in self.log.getvalue().splitlines() if x.strip()]
        return [x for x in lines if x.get("event") == name]

    async def reload(self) -> tuple[int, dict[str, Any]]:
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.admin.make_url("/-/reload")) as response,
        ):
            return response.status, await response.json()

    async def who(self, path: str = "/who") -> str:
        response = await self.mend.get(path)
        body = await response.json()
        assert response.status == 200, body
        return str(body["upstream"])


StartMend = Callable[[str], Awaitable[Running]]


@pytest.fixture
def start_mend(
    aiohttp_server: ServerFactory, aiohttp_client: ClientFactory, tmp_path: Path
) -> StartMend:
    async def start_one(text: str) -> Running:
        config = tmp_path / "mend.yaml"
        config.write_text(text)
        source = ConfigSource(config)
        registry, log = CollectorRegistry(), io.StringIO()
        logger = make_logger(log)
        server = create_app(source.load(), registry, logger=logger, source=source.load)
        mend = await aiohttp_client(MendTestServer(server))
        admin = await aiohttp_server(create_admin_app(server.proxy.store, registry, logger))
        return Running(config, mend, server, registry, log, admin)

    return start_one


async def test_a_reload_moves_a_route_to_another_upstream(
    aiohttp_server: ServerFactory, start_mend: StartMend
) -> None:
    """``POST /-/reload`` reads the config again: the route's new upstream answers from then."""
    a, b = await start("A", aiohttp_server), await start("B", aiohttp_server)
    running = await start_mend(config_text(a.url))
    assert await running.who() == "A"
    running.config.write_text(config_text(b.url))
    status, report = await running.reload()
    assert (status, report["status"]) == (200, "reloaded")
    assert await running.who() == "B"
    assert metric(running.registry, "mend_rule_reloads_total", result="success") == 2


async def test_a_request_in_flight_finishes_on_the_configuration_it_started_with(
    aiohttp_server: ServerFactory, start_mend: StartMend
) -> None:
    """A slow request sent to A before the reload is answered by A; one sent after, by B; the
    old pool closes only when its last request is done."""
    a, b = await start("A", aiohttp_server), await start("B", aiohttp_server)
    running = await start_mend(config_text(a.url, route=", read_timeout: 1"))
    in_flight = asyncio.ensure_future(running.mend.get("/slow"))
    await eventually(lambda: running.server.proxy.generation().active == 1)
    running.config.write_text(config_text(b.url))
    assert (await running.reload())[0] == 200
    assert await running.who() == "B"
    old = next(iter(running.server.proxy.generations.draining))
    assert old.active == 1  # still serving the slow request, on its own pool
    assert old.upstreams._pools
    a.release.set()
    response = await in_flight
    assert await response.json() == {"upstream": "A", "slow": True}
    await eventually(
        lambda: not running.server.proxy.generations.draining and not old.upstreams._pools
    )


async def test_an_unchanged_route_keeps_its_warm_connections_across_a_reload(
    aiohttp_server: ServerFactory, start_mend: StartMend
) -> None:
    """A reload that leaves a route's upstream as it was hands its pool over: the next request
    reuses the connection already open (no new connection reaches the upstream)."""
    connections: list[object] = []

    async def who(request: web.Request) -> web.Response:
        if request.transport not in connections:
            connections.append(request.transport)
        return web.json_response({"upstream": "A"})

    app = web.Application()
    app.router.add_get("/who", who)
    a = await aiohttp_server(app)
    url = str(a.make_url("/")).rstrip("/")
    running = await start_mend(config_text(url))
    assert await running.who() == "A"
    running.config.write_text(config_text(url, extra="retry_after_default_ms: 2000\n"))
    assert (await running.reload())[0] == 200
    assert await running.who() == "A"
    assert len(connections) == 1


async def test_limits_and_timeouts_apply_on_reload(
    aiohttp_server: ServerFactory, start_mend: StartMend
) -> None:
    """A request body limit added to the config refuses the next large body (413 envelope)."""
    a = await start("A", aiohttp_server)
    running = await start_mend(config_text(a.url))
    assert (await running.mend.post("/who", data=b"x" * 4096)).status == 200
    running.config.write_text(config_text(a.url, extra="request_body_max_bytes: 1024\n"))
    assert (await running.reload())[0] == 200
    response = await running.mend.post("/who", data=b"x" * 4096)
    assert response.status == 413
    assert (await response.json())["error"]["code"] == "REQUEST_TOO_LARGE"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("default_packs: false\nroutes:\n  - {name: api, upstream: 'localhost:1'}\n", 3),
        ("default_packs: false\nroutes:\n  - name: api\n    upstream: http://x\n    bogus: 1\n", 5),
        ("default_packs: false\nroutes: [\n", 3),
    ],
    ids=["url without scheme", "unknown key", "yaml syntax"],
)
async def test_an_invalid_config_keeps_the_running_one(
    aiohttp_server: ServerFactory, start_mend: StartMend, text: str, line: int
) -> None:
    """A broken config is rejected with ``file:line`` (admin answer and log), counted, and the
    running configuration keeps serving."""
    a = await start("A", aiohttp_server)
    running = await start_mend(config_text(a.url))
    running.config.write_text(text)
    status, report = await running.reload()
    assert (status, report["status"]) == (422, "rejected")
    assert any(p.startswith(f"{running.config}:{line}:") for p in report["problems"]), report
    assert running.events("rules_reload_rejected")[0]["problems"] == report["problems"]
    assert metric(running.registry, "mend_rule_reloads_total", result="failure") == 1
    assert metric(running.registry, "mend_rules_last_reload_successful") == 0
    assert await running.who() == "A"


async def test_a_setting_that_needs_a_restart_is_named_and_kept(
    aiohttp_server: ServerFactory, start_mend: StartMend
) -> None:
    """Changing ``listen`` or ``max_connections`` reloads the rest and names them in a
    warning; the agent port keeps serving where it was."""
    a, b = await start("A", aiohttp_server), await start("B", aiohttp_server)
    running = await start_mend(config_text(a.url))
    running.config.write_text(config_text(b.url, extra="listen: 127.0.0.1:1\nmax_connections: 7\n"))
    assert (await running.reload())[0] == 200
    [warning] = running.events("config_restart_needed")
    assert warning["settings"] == ["listen", "max_connections"]
    assert warning["level"] == "warning"
    assert await running.who() == "B"


async def test_a_route_can_move_to_a_tls_upstream_on_reload(
    aiohttp_server: ServerFactory, start_mend: StartMend, tmp_path: Path
) -> None:
    """A reload that points a route at an https upstream with its own CA (``tls.ca_file``)
    connects with that CA at once; a CA file that cannot be read is a rejected reload."""
    a = await start("A", aiohttp_server)
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    leaf.configure_cert(server_context)
    secure = await start("TLS", aiohttp_server, ssl=server_context)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(ca_file)
    running = await start_mend(config_text(a.url))
    secure_url = secure.url.replace("http://", "https://")
    running.config.write_text(config_text(secure_url, route=", tls: {ca_file: missing.pem}"))
    status, report = await running.reload()
    assert status == 422
    assert "routes[api].tls.ca_file" in report["problems"][0], report
    assert await running.who() == "A"
    running.config.write_text(config_text(secure_url, route=", tls: {ca_file: ca.pem}"))
    assert (await running.reload())[0] == 200
    assert await running.who() == "TLS"


async def test_the_watcher_reloads_an_edited_config_and_then_watches_its_new_files(
    aiohttp_server: ServerFactory, start_mend: StartMend, tmp_path: Path
) -> None:
    """Saving the config reloads it; a rule file it names from then on is watched too."""
    a, b = await start("A", aiohttp_server), await start("B", aiohttp_server)
    running = await start_mend(config_text(a.url))
    store = running.server.proxy.store
    watcher = RuleWatcher(
        store, make_logger(running.log), interval=0.02, debounce=0.05, config=running.config
    )
    watcher.start()
    await asyncio.sleep(0.2)  # its first look at the files, taken before they change
    try:
        rules = tmp_path / "teapot.yaml"
        rules.write_text(
            "rules:\n  - id: t.who\n    when: {status: 404}\n"
            "    envelope: {code: WHO_V1, category: not_found}\n"
        )
        running.config.write_text(config_text(b.url, extra="rules: [teapot.yaml]\n"))
        await eventually(lambda: store.settings.rules == (rules,))
        assert await running.who() == "B"
        await asyncio.sleep(0.2)  # the watcher's first look at the files the config names now
        rules.write_text(rules.read_text().replace("t.who", "t.who_v2"))
        await eventually(lambda: any(r.id == "t.who_v2" for r in store.engine.rules))
    finally:
        await watcher.stop()


@dataclass
class Load:
    """Clients sending requests back to back; every answer and failure is kept."""

    url: str
    answers: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def client(self) -> None:
        async with aiohttp.ClientSession() as session:
            while not self.stop.is_set():
                try:
                    async with session.get(self.url) as response:
                        body = await response.json()
                        if response.status != 200:
                            self.failures.append(f"{response.status} {body}")
                        else:
                            self.answers.append(body["upstream"])
                except (aiohttp.ClientError, ValueError, KeyError) as exc:
                    self.failures.append(repr(exc))


def _config_on_free_ports(tmp_path: Path, upstream: Upstream) -> tuple[Path, int, int, str]:
    """A config on free ports routing to ``upstream``: its path, ports and listener lines."""
    port, admin = free_port(), free_port()
    config = tmp_path / "mend.yaml"
    head = f"listen: 127.0.0.1:{port}\nadmin_listen: 127.0.0.1:{admin}\nwatch_rules: false\n"
    config.write_text(config_text(upstream.url, extra=head))
    return config, port, admin, head


async def _mend_run(config: Path, *flags: str) -> asyncio.subprocess.Process:
    """``mend run --config``; its log goes to ``mend.log`` beside the config: a pipe nobody
    reads while the test runs fills up with request lines and stalls mend's event loop."""
    with (config.parent / "mend.log").open("wb") as log:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "proxy", "run", "--config", str(config), *flags,
            cwd=ROOT, stdout=log, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip


async def test_mend_run_moves_a_route_under_load_on_sighup_without_a_failed_request(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    """A real ``mend run --config`` under load from four clients: the config moved to another
    upstream and SIGHUP, back and forth; every request answered, by A or B, none failed."""
    a, b = await start("A", aiohttp_server), await start("B", aiohttp_server)
    config, port, _admin, head = _config_on_free_ports(tmp_path, a)
    process = await _mend_run(config)
    load = Load(f"http://127.0.0.1:{port}/who")

    async def serving(name: str) -> None:
        start_at = len(load.answers)
        await eventually(lambda: name in load.answers[start_at:], seconds=15)

    try:
        async with aiohttp.ClientSession() as session:

            async def up() -> bool:
                try:
                    async with session.get(load.url) as response:
                        return response.status == 200
                except aiohttp.ClientError:
                    return False

            await eventually(up, seconds=20, pause=0.1)
        clients = [asyncio.ensure_future(load.client()) for _ in range(4)]
        for name, upstream in [("B", b), ("A", a), ("B", b)]:
            config.write_text(config_text(upstream.url, extra=head))
            os.kill(process.pid, signal.SIGHUP)
            await serving(name)
        # enough requests to call it load, however fast the three reloads went
        await eventually(lambda: len(load.answers) > 50, seconds=15)
        load.stop.set()
        await asyncio.gather(*clients)
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, err.decode()
    assert load.failures == []
    assert len(load.answers) > 50
    log = (config.parent / "mend.log").read_text()
    reloads = [json.loads(x) for x in log.splitlines() if '"rules_reloaded"' in x]
    assert [r["trigger"] for r in reloads] == ["SIGHUP"] * 3
    assert reloads[-1]["routes"] == [f"api / -> {b.url}"]


@pytest.mark.slow
async def test_every_worker_reads_the_config_again(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    """``--workers 2``: the supervisor's ``POST /-/reload`` rejects a broken config with
    ``file:line`` and then, once fixed, moves every worker's route (many connections, each
    answered by B)."""
    a, b = await start("A", aiohttp_server), await start("B", aiohttp_server)
    config, port, admin, head = _config_on_free_ports(tmp_path, a)
    process = await _mend_run(config, "--workers", "2")
    url, reload_url = f"http://127.0.0.1:{port}/who", f"http://127.0.0.1:{admin}/-/reload"

    async def answers(session: aiohttp.ClientSession) -> set[str]:
        seen = set()
        for _ in range(20):  # a new connection each: the kernel spreads them over the workers
            async with session.get(url, headers={"Connection": "close"}) as response:
                seen.add((await response.json())["upstream"])
        return seen

    try:
        async with aiohttp.ClientSession() as session:

            async def up() -> bool:
                try:
                    return await answers(session) == {"A"}
                except aiohttp.ClientError:
                    return False

            await eventually(up, seconds=30, pause=0.2)
            config.write_text(head + "routes: [\n")
            async with session.post(reload_url) as response:
                assert response.status == 422
                problems = (await response.json())["problems"]
                assert problems[0].startswith(f"{config}:5:"), problems
            config.write_text(config_text(b.url, extra=head))
            async with session.post(reload_url) as response:
                assert response.status == 200

            async def moved() -> bool:
                return await answers(session) == {"B"}

            await eventually(moved, seconds=15, pause=0.2)
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(process.communicate(), 40)
    assert process.returncode == 0, err.decode()
