"""The cross-call view shared by replicas through a real ``redis-server``: two mends (two app
instances on their own ports, and two ``mend run`` processes) in front of one failing upstream."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.conftest import Mend, StartMend, StartUpstream
from tests.hostile.procs import mend_process
from tests.redis_server import RedisServer, running_redis

SECRET = "shared-session-secret-0123456789"
#: what the failure script calls inside Redis (proxy/policy/crosscall/redis_store.py)
SCRIPT_CALLS = frozenset(
    {"hget", "hset", "hlen", "del", "pexpire", "zadd", "zremrangebyscore", "zcard"}
    | {"zremrangebyrank", "hgetall"}
)


#: one try per request (no retry policy, docs/retries.md): the circuit counts requests alone
ONE_TRY = {"attempts": 1}


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A real redis-server on a free port, no persistence, stopped by its PID."""
    with running_redis(tmp_path) as server:
        yield server


FASTAPI_422 = {"detail": [{"loc": ["body", "qty"], "msg": "must be > 0", "type": "value_error"}]}


async def _invalid(_: web.Request) -> web.Response:
    return web.json_response(FASTAPI_422, status=422)


async def _unauthorized(_: web.Request) -> web.Response:
    return web.json_response({"error": "invalid_token"}, status=401)


async def _replicas(
    start_mend: StartMend,
    upstream: Any,
    redis: RedisServer,
    timeout_ms: int = 1000,
    **settings: Any,
) -> tuple[Mend, Mend]:
    """Two mends sharing ``redis`` and the session secret, each on its own port. The store's
    timeout is generous (a loaded CI machine) except where a test measures it."""
    common = {
        "state": {"url": redis.url, "timeout_ms": timeout_ms},
        "session": {"secret": SECRET},
    }
    return (
        await start_mend(upstream, **common, **settings),
        await start_mend(upstream, **common, **settings),
    )


async def _post(mend: Mend, path: str, body: Any, session: str = "agent-1") -> dict[str, Any]:
    resp = await mend.client.post(path, json=body, headers={"X-Agent-Session": session})
    error: dict[str, Any] = (await resp.json())["error"]
    return error


async def test_identical_failures_alternated_across_replicas_escalate_on_the_third(
    start_upstream: StartUpstream, start_mend: StartMend, redis_server: RedisServer
) -> None:
    """A, B, A: the count is shared; the third is ``escalate`` wherever it lands."""
    a, b = await _replicas(
        start_mend, await start_upstream({"/api/orders": _invalid}), redis_server
    )
    first = await _post(a, "/api/orders", {"qty": -1})
    second = await _post(b, "/api/orders", {"qty": -1})
    third = await _post(a, "/api/orders", {"qty": -1})
    assert "repeat" not in first
    assert second["repeat"]["count"] == 2
    assert third["repeat"]["count"] == 3
    assert third["action"] == "escalate"
    assert third["severity"] == "fatal"
    assert third["repeat"]["first_at"] == second["repeat"]["first_at"]


async def test_patterns_appear_across_replicas(
    start_upstream: StartUpstream, start_mend: StartMend, redis_server: RedisServer
) -> None:
    """Auth failures on three endpoints, spread over two replicas: one session pattern."""
    a, b = await _replicas(
        start_mend, await start_upstream({"/api/{name}": _unauthorized}), redis_server
    )
    await _post(a, "/api/one", {})
    await _post(b, "/api/two", {})
    error = await _post(a, "/api/three", {})
    assert [p["category"] for p in error["session_patterns"]] == ["auth"]
    assert error["session_patterns"][0]["count"] == 3
    resp = await b.client.get("/_mend/session", headers={"X-Agent-Session": "agent-1"})
    summary = await resp.json()
    assert summary["failures_by_category"] == {"auth": 3}


async def test_circuit_opened_by_one_replica_is_seen_by_the_other(
    start_upstream: StartUpstream, start_mend: StartMend, redis_server: RedisServer
) -> None:
    """Replica A's failures open the operation's circuit; B answers from it without
    calling the upstream once its next look at the store (refresh_s) has happened."""
    calls: list[str] = []

    async def down(request: web.Request) -> web.Response:
        calls.append(request.path)
        return web.json_response({"error": "down"}, status=503)

    a, b = await _replicas(
        start_mend,
        await start_upstream({"/x": down}),
        redis_server,
        retries=ONE_TRY,
        circuit={"failures": 3, "open_s": 30, "refresh_s": 0.1},
    )
    assert (await b.client.get("/x")).status == 503  # B's failure counts for every replica
    for _ in range(2):
        await a.client.get("/x")
    assert len(calls) == 3  # the shared count reached 3: open
    blocked = (await (await a.client.get("/x")).json())["error"]
    assert blocked["rule"] == "proxy.upstream_unavailable"
    assert blocked["code"] == "SERVICE_UNAVAILABLE"  # the last real error's
    assert len(calls) == 3
    await asyncio.sleep(0.2)
    await b.client.get("/x")  # starts B's next look at the store, not waiting for it
    await asyncio.sleep(0.1)
    resp = await b.client.get("/x")
    error = (await resp.json())["error"]
    assert error["rule"] == "proxy.upstream_unavailable"
    assert 25_000 < error["retry_after_ms"] <= 30_000
    assert len(calls) <= 4
    assert b.metric("mend_circuit_state", route="default") == 1


async def test_a_success_costs_no_redis_command(
    start_upstream: StartUpstream, start_mend: StartMend, redis_server: RedisServer
) -> None:
    """Redis's own command counter: 50 successes send it nothing beyond the periodic circuit
    look (at most one per refresh_s); one failure sends one script (once the connection is
    made and the script loaded)."""
    import redis.asyncio as aioredis  # noqa: PLC0415

    async def ok(_: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    upstream = await start_upstream({"/ok": ok, "/bad": _invalid})
    a, _ = await _replicas(
        start_mend,
        upstream,
        redis_server,
        retries=ONE_TRY,
        circuit={"failures": 5, "refresh_s": 60},
    )
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        await a.client.get("/ok")  # the first look at the circuit
        await _post(a, "/bad", {"qty": -2})  # a connection made, the script loaded
        await asyncio.sleep(0.1)
        await client.config_resetstat()
        for _ in range(50):
            assert (await a.client.get("/ok")).status == 200
        after_successes = await client.info("commandstats")
        await client.config_resetstat()
        await _post(a, "/bad", {"qty": -1})
        after_failure = await client.info("commandstats")
    finally:
        await client.aclose()
    # commands the agent-facing requests sent (a script's own redis.call()s are counted too,
    # but they run inside Redis: the round trip is the EVALSHA)
    assert set(after_successes) == {"cmdstat_config|resetstat"}
    top_level = set(after_failure) - {
        "cmdstat_config|resetstat",
        *(f"cmdstat_{c}" for c in SCRIPT_CALLS),
    }
    assert top_level == {"cmdstat_evalsha"}
    assert after_failure["cmdstat_evalsha"]["calls"] == 1


@pytest.mark.slow
async def test_redis_killed_mid_load_and_restarted(
    start_upstream: StartUpstream, start_mend: StartMend, redis_server: RedisServer
) -> None:
    """Redis dies under load: every request is still answered, none waits much beyond
    state.timeout_ms, the fields are gone; Redis back on the same port: they return."""
    a, b = await _replicas(
        start_mend, await start_upstream({"/api/orders": _invalid}), redis_server, 200
    )
    assert "repeat" in [await _post(m, "/api/orders", {"qty": -1}) for m in (a, b)][1]

    async def timed(mend: Mend, n: int) -> tuple[float, dict[str, Any]]:
        began = time.perf_counter()
        error = await _post(mend, "/api/orders", {"qty": n})
        return time.perf_counter() - began, error

    redis_server.kill()
    results = await asyncio.gather(*(timed((a, b)[i % 2], i) for i in range(40)))
    assert all(error["code"] == "VALIDATION_FAILED" for _, error in results)
    assert max(elapsed for elapsed, _ in results) < 2.0  # 200 ms timeout, loaded test machine
    down = [await _post(m, "/api/orders", {"qty": -1}) for m in (a, b, a)]
    assert all("repeat" not in e and e["action"] == "fix_request" for e in down)
    assert a.metric("mend_state_errors_total", operation="record") > 0

    redis_server.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        error = await _post(a, "/api/orders", {"qty": -7})
        if "repeat" in error:
            break
        await asyncio.sleep(0.2)
    else:
        pytest.fail("the cross-call fields did not come back after Redis restarted")
    again = await _post(b, "/api/orders", {"qty": -7})
    assert again["repeat"]["count"] >= 3


async def test_a_stalled_redis_costs_at_most_the_timeout(
    start_upstream: StartUpstream, start_mend: StartMend, redis_server: RedisServer
) -> None:
    """Redis stopped (SIGSTOP: it accepts nothing, answers nothing): each failure is answered
    after about state.timeout_ms, without the fields; SIGCONT: they come back."""
    a, _ = await _replicas(
        start_mend, await start_upstream({"/api/orders": _invalid}), redis_server, 200
    )
    await _post(a, "/api/orders", {"qty": -1})
    assert redis_server.proc is not None
    os.kill(redis_server.proc.pid, signal.SIGSTOP)
    try:
        for _ in range(3):
            began = time.perf_counter()
            error = await _post(a, "/api/orders", {"qty": -1})
            assert time.perf_counter() - began < 1.5  # timeout 200 ms, loaded test machine
            assert "repeat" not in error
    finally:
        os.kill(redis_server.proc.pid, signal.SIGCONT)
    assert a.metric("mend_state_errors_total", operation="record") == 3
    for _ in range(20):
        error = await _post(a, "/api/orders", {"qty": -1})
        if "repeat" in error:
            break
        await asyncio.sleep(0.1)
    assert error["repeat"]["count"] >= 2


@pytest.mark.slow
async def test_two_mend_processes_escalate_on_the_third(
    start_upstream: StartUpstream, redis_server: RedisServer, tmp_path: Path
) -> None:
    """Two ``mend run`` processes with ``state: redis://`` and MEND_SESSION_SECRET-style
    shared secret: the same bad request sent to A, B, A escalates on the third."""
    upstream = await start_upstream({"/api/orders": _invalid})
    config = {
        "watch_rules": False,
        "state": redis_server.url,
        "session": {"secret": SECRET},
        "routes": [{"name": "api", "upstream": str(upstream.make_url("/")).rstrip("/")}],
    }
    with mend_process(tmp_path, config) as a, mend_process(tmp_path, config) as b:
        async with aiohttp.ClientSession() as http:
            errors = []
            for port in (a.port, b.port, a.port):
                async with http.post(
                    f"http://127.0.0.1:{port}/api/orders",
                    json={"qty": -1},
                    headers={"Authorization": "Bearer agent-token"},
                ) as resp:
                    errors.append((await resp.json())["error"])
    assert [e.get("repeat", {}).get("count") for e in errors] == [None, 2, 3]
    assert errors[2]["action"] == "escalate"
    assert "agent-token" not in a.log_path.read_text() + b.log_path.read_text()
