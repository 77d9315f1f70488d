"""The cross-call view in one mend (memory store): repeats, loops, patterns, sessions, circuits."""

from __future__ import annotations

import asyncio
import io
import re
import time
from typing import Any

import pytest
from aiohttp import web

from proxy.config.crosscall import SessionSettings, StateSettings
from proxy.config.route import Route
from proxy.config.settings import Settings
from proxy.policy.crosscall.circuit import Blocked
from proxy.policy.crosscall.memory import MemoryStore
from proxy.policy.crosscall.patterns import load_suggestions
from proxy.policy.crosscall.session import Sessions
from tests.conftest import Mend, StartMend, StartUpstream
from tests.runtime.test_app import free_port

FASTAPI_422 = {"detail": [{"loc": ["body", "qty"], "msg": "must be > 0", "type": "value_error"}]}
_NEVER = Blocked(0, "", 0, None)
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


#: one try per request (no retry policy, docs/retries.md): the circuit counts requests alone
ONE_TRY = {"attempts": 1}


async def _invalid(_: web.Request) -> web.Response:
    return web.json_response(FASTAPI_422, status=422)


async def _unauthorized(_: web.Request) -> web.Response:
    return web.json_response({"error": "invalid_token"}, status=401)


async def _limited(_: web.Request) -> web.Response:
    return web.json_response({"error": "slow down"}, status=429, headers={"Retry-After": "5"})


async def _ok(_: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def _store(mend: Mend) -> MemoryStore:
    server: Any = mend.client.server  # conftest's MendTestServer
    store = server.mend.proxy.crosscall.store
    assert isinstance(store, MemoryStore)
    return store


async def _post(mend: Any, path: str, body: Any, session: str = "s1") -> dict[str, Any]:
    resp = await mend.client.post(path, json=body, headers={"X-Agent-Session": session})
    error: dict[str, Any] = (await resp.json())["error"]
    return error


async def test_first_failure_has_no_repeat(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A failure seen once carries no ``repeat`` and no ``session_patterns``."""
    mend = await start_mend(await start_upstream({"/api/orders": _invalid}))
    error = await _post(mend, "/api/orders", {"qty": -1})
    assert error["code"] == "VALIDATION_FAILED"
    assert "repeat" not in error
    assert "session_patterns" not in error


async def test_second_identical_failure_carries_repeat(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """The same request failing the same way again: ``repeat`` with count, window, first time."""
    mend = await start_mend(await start_upstream({"/api/orders": _invalid}))
    await _post(mend, "/api/orders", {"qty": -1})
    error = await _post(mend, "/api/orders", {"qty": -1})
    assert error["repeat"]["count"] == 2
    assert error["repeat"]["window_s"] == 600
    assert RFC3339.match(error["repeat"]["first_at"])
    assert error["action"] == "fix_request"  # not a loop yet


async def test_third_identical_failure_escalates(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """At escalate_after identical non-retryable failures: escalate, fatal, told to stop, and
    the original advice kept as the next step."""
    mend = await start_mend(await start_upstream({"/api/orders": _invalid}))
    first = await _post(mend, "/api/orders", {"qty": -1})
    await _post(mend, "/api/orders", {"qty": -1})
    third = await _post(mend, "/api/orders", {"qty": -1})
    assert third["action"] == "escalate"
    assert third["severity"] == "fatal"
    assert third["retryable"] is False
    assert "failed 3 times" in third["hint"]
    assert "do not send it again unchanged" in third["steps"][0]
    assert third["steps"][1] == first["hint"]
    assert third["repeat"]["count"] == 3
    assert third["field"] == first["field"]  # the per-call diagnosis is kept


async def test_changed_body_is_not_a_repeat(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """An agent that changes its request is not looping: a different body starts afresh."""
    mend = await start_mend(await start_upstream({"/api/orders": _invalid}))
    await _post(mend, "/api/orders", {"qty": -1})
    await _post(mend, "/api/orders", {"qty": -1})
    error = await _post(mend, "/api/orders", {"qty": -2})
    assert "repeat" not in error
    assert error["action"] == "fix_request"


async def test_sessions_do_not_share_repeats(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """Two agents (two session headers) sending the same bad request are not each other's loop."""
    mend = await start_mend(await start_upstream({"/api/orders": _invalid}))
    await _post(mend, "/api/orders", {"qty": -1}, session="a")
    await _post(mend, "/api/orders", {"qty": -1}, session="a")
    error = await _post(mend, "/api/orders", {"qty": -1}, session="b")
    assert "repeat" not in error


async def test_retryable_retried_early_is_told_how_long_to_wait(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A 429 retried before its retry_after_ms: "wait N ms more"; a retryable never escalates."""
    mend = await start_mend(await start_upstream({"/api/orders": _limited}))
    for _ in range(2):
        await _post(mend, "/api/orders", {"q": 1})
    error = await _post(mend, "/api/orders", {"q": 1})
    assert error["action"] == "retry"
    assert error["repeat"]["count"] == 3
    wait = re.search(r"wait ([\d,]+) ms more", error["hint"])
    assert wait is not None, error["hint"]
    assert 4000 <= int(wait.group(1).replace(",", "")) <= 5000


async def test_pattern_across_different_requests(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """401 on three different endpoints: an auth session pattern with its suggestion; the
    per-call fields stay what the call alone says."""
    mend = await start_mend(await start_upstream({"/api/{name}": _unauthorized}))
    first = await _post(mend, "/api/a", {})
    second = await _post(mend, "/api/b", {})
    third = await _post(mend, "/api/c", {})
    assert "session_patterns" not in second
    assert third["session_patterns"] == [
        {"category": "auth", "count": 3, "suggestion": load_suggestions()["auth"]}  # type: ignore[index]
    ]
    for key in ("code", "action", "severity", "retryable", "category"):
        assert third[key] == first[key], key
    assert third["hint"] == first["hint"].replace("/api/a", "/api/c")
    assert "repeat" not in third


async def test_same_request_repeated_is_not_a_pattern(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """Patterns count different requests: one request failing three times is a repeat only."""
    mend = await start_mend(await start_upstream({"/api/{name}": _unauthorized}))
    for _ in range(3):
        error = await _post(mend, "/api/a", {})
    assert "session_patterns" not in error
    assert error["repeat"]["count"] == 3


async def test_session_summary_shows_only_the_callers_session(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """``GET /_mend/session`` answers with the caller's own failures, never another session's."""
    mend = await start_mend(await start_upstream({"/api/{name}": _unauthorized}))
    await _post(mend, "/api/mine", {}, session="me")
    await _post(mend, "/api/mine", {}, session="me")
    await _post(mend, "/api/theirs", {}, session="other")
    resp = await mend.client.get("/_mend/session", headers={"X-Agent-Session": "me"})
    assert resp.status == 200
    summary = await resp.json()
    assert summary["available"] is True
    assert summary["failures_by_category"] == {"auth": 1}
    assert [(r["path"], r["count"]) for r in summary["repeats"]] == [("/api/mine", 2)]
    assert "theirs" not in await resp.text()
    assert summary["session"] != "me"  # an id derived from it, not the header itself


async def test_credentials_are_never_stored_or_logged(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A session from the Authorization header: the token is in no log line and no store key."""
    token = "Bearer sk-live-0123456789abcdef0123"
    mend = await start_mend(await start_upstream({"/api/{name}": _unauthorized}))
    for path in ("/api/a", "/api/b"):
        await mend.client.get(path, headers={"Authorization": token})
    store = _store(mend)
    assert "sk-live" not in mend.log.getvalue()
    assert all("sk-live" not in key for key in store._sessions)
    assert len(store._sessions) == 1


def test_session_id_depends_on_the_secret() -> None:
    """Replicas with the same secret agree on a credential's session; another secret does not,
    and the id never contains the credential."""
    headers = {"Authorization": "Bearer abc"}
    one = Sessions(SessionSettings(secret="a" * 32)).identify(headers, "10.0.0.1")
    two = Sessions(SessionSettings(secret="a" * 32)).identify(headers, "10.0.0.1")
    other = Sessions(SessionSettings(secret="b" * 32)).identify(headers, "10.0.0.1")
    elsewhere = Sessions(SessionSettings(secret="a" * 32)).identify(headers, "10.0.0.2")
    assert one == two
    assert one != other
    assert one != elsewhere
    assert "abc" not in one


async def test_success_does_no_crosscall_work(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """Successes leave nothing in the store: no session, no circuit entry."""
    mend = await start_mend(await start_upstream({"/ok": _ok}))
    for _ in range(20):
        assert (await mend.client.get("/ok")).status == 200
    store = _store(mend)
    assert store.entries == 0
    assert not store._sessions
    assert not store._circuits


def test_state_short_form_and_bad_url() -> None:
    """``state: redis://...`` is the URL; anything but memory or redis:// is refused."""
    assert StateSettings.model_validate("redis://127.0.0.1:6379/0").url.startswith("redis://")
    with pytest.raises(ValueError, match="redis://host:port/db"):
        StateSettings.model_validate("http://127.0.0.1:6379")


def test_patterns_table_names_every_category_once() -> None:
    """The suggestion table is checked on load: an unknown category is an error."""
    assert len(load_suggestions()) == 15
    with pytest.raises(ValueError, match="unknown categories"):
        load_suggestions("auth: x\nauthz: y\n")


# --- circuit -----------------------------------------------------------------------------------


async def test_circuit_opens_answers_at_once_and_closes_after_a_probe(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """3 consecutive 503s open the circuit: the last 503's code at once without an upstream
    call, retry_after_ms = the time left; after open_s one probe goes through and closes it."""
    calls = []
    healthy = False

    async def flaky(_: web.Request) -> web.Response:
        calls.append(1)
        if healthy:
            return web.json_response({"ok": True})
        return web.json_response({"error": "down"}, status=503)

    mend = await start_mend(
        await start_upstream({"/api/x": flaky}),
        retries=ONE_TRY,
        circuit={"failures": 3, "open_s": 0.5},
    )
    for _ in range(3):
        await mend.client.get("/api/x")
    assert len(calls) == 3
    resp = await mend.client.get("/api/x")
    error = (await resp.json())["error"]
    assert resp.status == 503
    assert error["code"] == "SERVICE_UNAVAILABLE"
    assert error["rule"] == "proxy.upstream_unavailable"
    assert "UPSTREAM_UNAVAILABLE" in error["related_codes"]
    assert error["retryable"] is True
    assert 0 < error["retry_after_ms"] <= 500
    assert len(calls) == 3
    assert mend.metric("mend_circuit_state", route="default") == 1
    await asyncio.sleep(0.55)
    healthy = True
    assert (await mend.client.get("/api/x")).status == 200
    assert len(calls) == 4
    assert mend.metric("mend_circuit_state", route="default") == 0
    events = [line["event"] for line in mend.log_lines() if line["event"].startswith("circuit")]
    assert events == ["circuit_open", "circuit_closed"]


async def test_circuit_failed_probe_opens_again(start_mend: StartMend) -> None:
    """An unreachable upstream: open after 2 failures; the probe fails too: open again."""
    mend = await start_mend(
        f"http://127.0.0.1:{free_port()}", retries=ONE_TRY, circuit={"failures": 2, "open_s": 0.3}
    )
    rules = [(await (await mend.client.get("/x")).json())["error"]["rule"] for _ in range(3)]
    assert rules == [
        "proxy.upstream_unreachable",
        "proxy.upstream_unreachable",
        "proxy.upstream_unavailable",
    ]
    await asyncio.sleep(0.35)
    probe = (await (await mend.client.get("/x")).json())["error"]
    assert probe["rule"] == "proxy.upstream_unreachable"
    after = (await (await mend.client.get("/x")).json())["error"]
    assert after["rule"] == "proxy.upstream_unavailable"
    assert after["code"] == "UPSTREAM_UNREACHABLE"  # the last real error's
    assert after["retry_after_ms"] > 200


async def test_a_success_resets_the_count(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """Failures must be consecutive: a success between them starts the count again."""
    statuses = iter([503, 503, 200, 503, 503, 200])

    async def varied(_: web.Request) -> web.Response:
        return web.json_response({}, status=next(statuses))

    mend = await start_mend(
        await start_upstream({"/x": varied}), retries=ONE_TRY, circuit={"failures": 3}
    )
    seen = [(await mend.client.get("/x")).status for _ in range(6)]
    assert seen == [503, 503, 200, 503, 503, 200]


async def test_circuit_off_by_default(start_mend: StartMend) -> None:
    """Without ``circuit.failures`` there is no breaker: eight unreachable answers, all real."""
    mend = await start_mend(f"http://127.0.0.1:{free_port()}")
    rules = {(await (await mend.client.get("/x")).json())["error"]["rule"] for _ in range(8)}
    assert rules == {"proxy.upstream_unreachable"}


async def test_circuit_covers_one_operation(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """An open circuit on ``GET /items/{id}`` leaves ``GET /items`` and ``POST /items/{id}``
    on the same route untouched, and covers ``GET /items/8`` (ids collapse)."""
    calls: list[str] = []

    async def down(request: web.Request) -> web.Response:
        calls.append(request.method + request.path)
        return web.json_response({"error": "down"}, status=503)

    upstream = await start_upstream(
        {"GET /items/{id}": down, "POST /items/{id}": _ok, "/items": _ok}
    )
    mend = await start_mend(upstream, retries=ONE_TRY, circuit={"failures": 2, "open_s": 30})
    for _ in range(2):
        await mend.client.get("/items/7")
    blocked = await mend.client.get("/items/8")
    assert (await blocked.json())["error"]["rule"] == "proxy.upstream_unavailable"
    assert calls == ["GET/items/7", "GET/items/7"]
    assert (await mend.client.get("/items")).status == 200
    assert (await mend.client.post("/items/7", json={})).status == 200


async def test_4xx_never_opens_a_circuit(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """Ten 429s and 404s in a row are the request's fault: every one reaches the upstream."""
    mend = await start_mend(
        await start_upstream({"/x": _limited}),
        retries=ONE_TRY,
        circuit={"failures": 2, "statuses": [503]},
    )
    rules = {(await (await mend.client.get("/x")).json())["error"]["rule"] for _ in range(10)}
    assert "proxy.upstream_unavailable" not in rules


async def test_open_circuit_honours_a_longer_retry_after(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A 503 with ``Retry-After: 120`` opens the circuit for 120 s, not ``open_s``'s 1 s."""

    async def busy(_: web.Request) -> web.Response:
        return web.Response(status=503, text="busy", headers={"Retry-After": "120"})

    mend = await start_mend(
        await start_upstream({"/x": busy}), retries=ONE_TRY, circuit={"failures": 1, "open_s": 1}
    )
    await mend.client.get("/x")
    resp = await mend.client.get("/x")
    error = (await resp.json())["error"]
    assert error["rule"] == "proxy.upstream_unavailable"
    assert 110_000 < error["retry_after_ms"] <= 120_000
    assert 110 < int(resp.headers["Retry-After"]) <= 120


async def test_unreachable_store_fails_open_within_the_timeout(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A Redis that is not there: the envelope comes without the cross-call fields, in time,
    and the failure is counted."""
    mend = await start_mend(
        await start_upstream({"/api/orders": _invalid}),
        state={"url": f"redis://127.0.0.1:{free_port()}/0", "timeout_ms": 50},
        session={"secret": "s" * 32},
    )
    for _ in range(3):
        began = time.perf_counter()
        error = await _post(mend, "/api/orders", {"qty": -1})
        assert time.perf_counter() - began < 1.0
        assert error["code"] == "VALIDATION_FAILED"
        assert "repeat" not in error
        assert error["action"] == "fix_request"
    assert mend.metric("mend_state_errors_total", operation="record") == 3
    warnings = [line for line in mend.log_lines() if line["event"] == "state_store_error"]
    assert len(warnings) == 1  # once per interval


def test_config_accepts_the_three_blocks() -> None:
    """``session``, ``state`` and ``circuit`` are settings like the others."""
    settings = Settings(
        routes=(Route(name="a", upstream="http://127.0.0.1:9"),),
        session={"escalate_after": 4, "secret": "x" * 16},
        state="redis://127.0.0.1:6379/2",
        retries=ONE_TRY,
        circuit={"failures": 7},
    )
    assert settings.session.escalate_after == 4
    assert settings.state.is_redis
    assert settings.circuit.failures == 7


async def test_mcp_tool_call_resent_with_new_ids_escalates(
    aiohttp_server: Any, start_mend: StartMend
) -> None:
    """An MCP agent resending the same failing tools/call (a new JSON-RPC id each time) is
    looping too: the third tool result carries escalate in ``_meta["mend/error"]``."""
    from demo.legacy_api import create_legacy_app  # noqa: PLC0415

    mend = await start_mend(await aiohttp_server(create_legacy_app()))
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
        "Mcp-Session-Id": "mcp-session-1",
    }
    envelopes = []
    for call_id in (1, 2, 3):
        call = {
            "jsonrpc": "2.0",
            "id": call_id,
            "method": "tools/call",
            "params": {"name": "create_ticket", "arguments": {"title": "t", "priority": 9}},
        }
        resp = await mend.client.post("/mcp", json=call, headers=headers)
        answer = await resp.json()
        assert answer["id"] == call_id
        assert answer["result"]["isError"] is True
        envelopes.append(answer["result"]["_meta"]["mend/error"])
    assert [e.get("repeat", {}).get("count") for e in envelopes] == [None, 2, 3]
    assert envelopes[2]["action"] == "escalate"
    assert "failed 3 times" in envelopes[2]["hint"]


async def test_a_probe_that_never_reports_is_given_up() -> None:
    """A half-open probe whose request never reached the upstream (refused on the way) does
    not hold the circuit half-open forever: after open_s another probe may go."""
    from prometheus_client import CollectorRegistry  # noqa: PLC0415

    from proxy.config.crosscall import CircuitSettings  # noqa: PLC0415
    from proxy.observation.logs import make_logger  # noqa: PLC0415
    from proxy.policy.crosscall.circuit import Circuits  # noqa: PLC0415
    from proxy.policy.crosscall.guard import Guard  # noqa: PLC0415

    registry, log = CollectorRegistry(), make_logger(io.StringIO())
    circuits = Circuits(
        CircuitSettings(failures=1, open_s=0.2),
        MemoryStore(),
        Guard(50, 60, registry, log),
        registry,
        log,
        shared=False,
    )
    await circuits.failed("r", "r GET /x", "unreachable", None, None)
    assert ((await circuits.blocked("r", "r GET /x")) or _NEVER).wait_ms > 0
    await asyncio.sleep(0.25)
    assert await circuits.blocked("r", "r GET /x") is None  # the probe: never reports back
    assert ((await circuits.blocked("r", "r GET /x")) or _NEVER).wait_ms == 1000  # others wait
    await asyncio.sleep(0.25)
    assert await circuits.blocked("r", "r GET /x") is None  # given up: a new probe


async def test_a_tools_is_error_never_opens_a_circuit(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """Five MCP tool results with ``isError: true`` (in 200s) with ``failures: 1``: every call
    reaches the upstream and comes back a tool result, none a circuit's answer."""
    calls: list[int] = []

    async def tool(request: web.Request) -> web.Response:
        call = await request.json()
        calls.append(call["id"])
        result = {"content": [{"type": "text", "text": "disk full"}], "isError": True}
        return web.json_response({"jsonrpc": "2.0", "id": call["id"], "result": result})

    mend = await start_mend(
        await start_upstream({"/mcp": tool}), retries=ONE_TRY, circuit={"failures": 1}
    )
    headers = {"Accept": "application/json", "MCP-Protocol-Version": "2025-06-18"}
    for call_id in range(1, 6):
        call = {
            "jsonrpc": "2.0",
            "id": call_id,
            "method": "tools/call",
            "params": {"name": "save", "arguments": {}},
        }
        answer = await (await mend.client.post("/mcp", json=call, headers=headers)).json()
        assert answer["result"]["isError"] is True
        assert answer["result"]["_meta"]["mend/error"]["rule"] != "proxy.upstream_unavailable"
    assert calls == [1, 2, 3, 4, 5]


async def test_a_documented_operation_is_one_circuit(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """With an OpenAPI document the circuit is the documented operation: failures of
    ``GET /orders/abc`` open ``GET /orders/{orderId}`` for ``/orders/xyz`` too (no id-like
    segment in either), and leave ``GET /orders/latest``, another operation, alone."""
    from tests.policy.openapi.test_openapi_proxy import SPECS  # noqa: PLC0415

    calls: list[str] = []

    async def one(request: web.Request) -> web.Response:
        calls.append(request.path)
        return web.json_response({"error": "down"}, status=503)

    upstream = await start_upstream(
        {"GET /api/v1/orders/latest": _ok, "GET /api/v1/orders/{id}": one}
    )
    url = str(upstream.make_url("/api/v1")).rstrip("/")
    mend = await start_mend(
        url, route={"openapi": SPECS[0]}, retries=ONE_TRY, circuit={"failures": 2}
    )
    for _ in range(2):
        await mend.client.get("/orders/abc")
    blocked = (await (await mend.client.get("/orders/xyz")).json())["error"]
    assert blocked["rule"] == "proxy.upstream_unavailable"
    assert "GET /orders/{orderId}" in blocked["hint"]
    assert calls == ["/api/v1/orders/abc", "/api/v1/orders/abc"]
    assert (await mend.client.get("/orders/latest")).status == 200


async def test_circuit_tables_are_capped() -> None:
    """Agents choose paths: past ``MAX_VIEWS`` / ``MAX_CIRCUITS`` distinct operations the
    oldest are forgotten, the tables never grow beyond their caps."""
    from prometheus_client import CollectorRegistry  # noqa: PLC0415

    from proxy.config.crosscall import CircuitSettings  # noqa: PLC0415
    from proxy.observation.logs import make_logger  # noqa: PLC0415
    from proxy.policy.crosscall import circuit, memory  # noqa: PLC0415
    from proxy.policy.crosscall.guard import Guard  # noqa: PLC0415

    registry, log = CollectorRegistry(), make_logger(io.StringIO())
    store = MemoryStore()
    circuits = circuit.Circuits(
        CircuitSettings(failures=3),
        store,
        Guard(50, 60, registry, log),
        registry,
        log,
        shared=False,
    )
    for n in range(circuit.MAX_VIEWS + 50):
        key = f"r GET /w{'x' * (n % 7)}/{chr(97 + n % 26)}{n:x}"
        await circuits.blocked("r", key)
        await circuits.failed("r", key, "unreachable", None, None)
    assert len(circuits._views) <= circuit.MAX_VIEWS
    assert len(store._circuits) <= memory.MAX_CIRCUITS


def _review() -> Any:
    from prometheus_client import CollectorRegistry  # noqa: PLC0415

    from proxy.observation.logs import make_logger  # noqa: PLC0415
    from proxy.policy.crosscall.guard import Guard  # noqa: PLC0415
    from proxy.policy.crosscall.review import Review  # noqa: PLC0415

    registry, log = CollectorRegistry(), make_logger(io.StringIO())
    settings = SessionSettings(secret="a" * 32)
    return Review(settings, MemoryStore(), Guard(50, 60, registry, log), load_suggestions())


def _built(retryable: bool) -> Any:
    from proxy.policy.envelope.model import Action, Category, Envelope, Severity  # noqa: PLC0415

    return Envelope(
        code="upstream.rate_limited" if retryable else "upstream.validation",
        message="m",
        category=Category.RATE_LIMIT if retryable else Category.VALIDATION,
        severity=Severity.ERROR,
        retryable=retryable,
        retry_after_ms=5000 if retryable else None,
        action=Action.RETRY if retryable else Action.FIX_REQUEST,
        hint="h",
        steps=("one", "two"),
        request_id="req_1",
        upstream_status=429 if retryable else 422,
        rule="r",
    )


@pytest.mark.parametrize("retryable", [False, True])
def test_revise_equals_the_validated_model_copy(retryable: bool) -> None:
    """``revise`` builds without validation what ``model_copy`` and validation made before:
    repeat, patterns, escalation or early-retry advice, equal field for field."""
    from proxy.policy.crosscall.store import Seen  # noqa: PLC0415
    from proxy.policy.envelope.model import Envelope, RepeatInfo, SessionPattern  # noqa: PLC0415

    review = _review()
    envelope = _built(retryable)
    seen = Seen(4, 1_764_230_400_123, 1_764_230_409_000, {"validation": 3, "rate_limit": 3})
    revised = review.revise(envelope, seen, 1_764_230_405_000, "POST", "/orders")
    again = review.revise(envelope, seen, 1_764_230_405_000, "POST", "/orders")
    assert revised == again
    update = {
        k: v for k, v in revised.__dict__.items() if v != envelope.__dict__[k] or k == "repeat"
    }
    assert update["repeat"] == RepeatInfo(
        count=4, window_s=600, first_at="2025-11-27T08:00:00.123Z"
    )
    assert all(isinstance(p, SessionPattern) for p in update["session_patterns"])
    assert {"hint", "steps"} <= update.keys()
    assert revised == envelope.model_copy(update=update)
    assert Envelope.model_validate(revised.model_dump()) == revised
    assert revised.as_dict() == Envelope.model_validate(revised.model_dump()).as_dict()


def test_rfc3339_and_patterns_are_remembered_within_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    """A formatted instant and a session's patterns are computed once, and their tables stay
    under ``MEMO_MAX`` whatever the store returns."""
    from proxy.policy.crosscall import review as review_module  # noqa: PLC0415

    monkeypatch.setattr(review_module, "MEMO_MAX", 3)
    monkeypatch.setattr(review_module, "_RFC3339", {})
    texts = [review_module.rfc3339(1_764_230_400_000 + n) for n in range(10)]
    assert texts[1] == "2025-11-27T08:00:00.001Z"
    assert len(review_module._RFC3339) <= 3
    review = _review()
    first = review.patterns({"validation": 5})
    assert review.patterns({"validation": 5}) is first
    for n in range(10):
        review.patterns({"validation": n})
    assert len(review._patterns) <= 3
    assert review.patterns({"validation": 5}) == first
