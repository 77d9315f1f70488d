"""The demo: the legacy API fails (and succeeds) as documented, the agent recovers only from what
envelopes say, and ``python -m demo.run`` shows mend raising the agent's completion rate."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from demo.agent import (
    AgentSettings,
    Call,
    Fix,
    PointerError,
    Task,
    apply_fixes,
    default_tasks,
    get_pointer,
    parse_operation,
    plan_fixes,
    run_agent,
    set_pointer,
)
from demo.legacy_api import CLIENT_ID, CLIENT_SECRET, NGINX_503, create_legacy_app
from proxy.policy.envelope.model import Action, Envelope, Severity, envelope_body

REPO = Path(__file__).resolve().parents[1]
StartServer = Callable[..., Awaitable[TestServer]]


def base_url(server: TestServer) -> str:
    return f"http://{server.host}:{server.port}"


@pytest.fixture
async def legacy(aiohttp_server: StartServer) -> TestServer:
    """The legacy API on a free loopback port, fast: 1 s Retry-After, 0.3 s slow report."""
    return await aiohttp_server(create_legacy_app(retry_after_s=1, slow_seconds=0.3))


async def call(
    server: TestServer, method: str, path: str, *, client: str = "t", **kwargs: Any
) -> tuple[int, dict[str, str], str]:
    headers = {"X-Client-Id": client, **kwargs.pop("headers", {})}
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, base_url(server) + path, headers=headers, **kwargs) as resp,
    ):
        return resp.status, dict(resp.headers), await resp.text()


# -- the legacy API -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "expected"),
    [
        pytest.param(
            "POST",
            "/api/orders",
            {"sku": "WIDGET-1", "qty": -1},
            422,
            {
                "detail": [
                    {
                        "type": "greater_than",
                        "loc": ["body", "qty"],
                        "msg": "Input should be greater than 0",
                        "input": -1,
                        "ctx": {"gt": 0},
                    }
                ]
            },
            id="fastapi-422",
        ),
        pytest.param(
            "POST",
            "/api/drf/orders",
            {"sku": "XYZ", "quantity": 0},
            400,
            {
                "quantity": ["Ensure this value is greater than or equal to 1."],
                "sku": ['"XYZ" is not a valid choice.'],
            },
            id="drf-400",
        ),
        pytest.param(
            "POST",
            "/graphql",
            {"query": "{ order(id: 17) { id totl } }"},
            200,
            {
                "data": None,
                "errors": [
                    {
                        "message": (
                            'Cannot query field "totl" on type "Order". Did you mean "total"?'
                        ),
                        "locations": [{"line": 1, "column": 22}],
                        "extensions": {"code": "GRAPHQL_VALIDATION_FAILED"},
                    }
                ],
            },
            id="graphql-errors-in-200",
        ),
        pytest.param(
            "POST",
            "/mcp",
            {
                "jsonrpc": "2.0",
                "id": 4,
                "method": "tools/call",
                "params": {"name": "create_ticket", "arguments": {"title": "t", "priority": 9}},
            },
            200,
            {
                "jsonrpc": "2.0",
                "id": 4,
                "result": {
                    "content": [
                        {
                            "type": "text",
                            "text": (
                                "Error executing tool create_ticket: 1 validation error for "
                                "create_ticketArguments\npriority\n  Input should be less than "
                                "or equal to 5 [type=less_than_equal, input_value=9, "
                                "input_type=int]\n    For further information visit "
                                "https://errors.pydantic.dev/2.11/v/less_than_equal"
                            ),
                        }
                    ],
                    "isError": True,
                },
            },
            id="mcp-tool-is-error",
        ),
        pytest.param(
            "POST",
            "/api/orders/17/ship",
            None,
            409,
            {
                "error": "order_not_confirmed",
                "message": "Order 17 must be confirmed before shipping.",
            },
            id="ship-before-confirm-409",
        ),
    ],
)
async def test_error_bodies_match_the_framework(
    legacy: TestServer, method: str, path: str, body: Any, status: int, expected: Any
) -> None:
    """Each endpoint answers a bad call with its framework's exact native error body."""
    got_status, _, text = await call(legacy, method, path, json=body)
    assert (got_status, json.loads(text)) == (status, expected)


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "expected"),
    [
        pytest.param(
            "POST",
            "/api/orders",
            {"sku": "WIDGET-1", "qty": 2},
            201,
            {"id": 1, "sku": "WIDGET-1", "qty": 2, "status": "pending"},
            id="fastapi",
        ),
        pytest.param(
            "POST",
            "/api/drf/orders",
            {"sku": "WIDGET-2", "quantity": 1},
            201,
            {"id": 1, "sku": "WIDGET-2", "quantity": 1, "status": "pending"},
            id="drf",
        ),
        pytest.param(
            "POST",
            "/graphql",
            {"query": "{ order(id: 17) { id total } }"},
            200,
            {"data": {"order": {"id": "17", "total": 42.5}}},
            id="graphql",
        ),
    ],
)
async def test_correct_calls_succeed(
    legacy: TestServer, method: str, path: str, body: Any, status: int, expected: Any
) -> None:
    """The same endpoints succeed once called correctly."""
    got_status, _, text = await call(legacy, method, path, json=body)
    assert (got_status, json.loads(text)) == (status, expected)


async def test_spring_500_leaks_trace_sql_and_jdbc_url(legacy: TestServer) -> None:
    """The invoice bug answers Spring Boot's error JSON with everything mend must hide."""
    status, headers, text = await call(legacy, "GET", "/api/orders/17/invoice")
    body = json.loads(text)
    assert status == 500
    assert headers["Server"] == "Apache-Tomcat/9.0.83"
    assert "Tomcat" in headers["X-Powered-By"]
    assert set(body) == {"timestamp", "status", "error", "trace", "message", "path"}
    assert body["trace"].startswith("org.springframework.jdbc.BadSqlGrammarException")
    assert "\n\tat com.acme.orders" in body["trace"]
    assert "jdbc:postgresql://orders-db-01.prod.internal:5432" in body["message"]
    assert "password=" in body["message"]
    assert body["path"] == "/api/orders/17/invoice"


async def test_rate_limit_lifts_after_retry_after(legacy: TestServer) -> None:
    """429 with Retry-After on the first call and during the wait, 200 once it has passed."""
    first = await call(legacy, "GET", "/api/orders/17/tracking")
    again = await call(legacy, "GET", "/api/orders/17/tracking")
    await asyncio.sleep(1.05)
    later = await call(legacy, "GET", "/api/orders/17/tracking")
    assert (first[0], first[1]["Retry-After"]) == (429, "1")
    assert again[0] == 429
    assert later[0] == 200


async def test_rate_limit_is_per_client(legacy: TestServer) -> None:
    """One client's rate limit does not touch another's."""
    await call(legacy, "GET", "/api/orders/17/tracking", client="a")
    await asyncio.sleep(1.05)
    status_a, _, _ = await call(legacy, "GET", "/api/orders/17/tracking", client="a")
    status_b, _, _ = await call(legacy, "GET", "/api/orders/17/tracking", client="b")
    assert (status_a, status_b) == (200, 429)


async def test_nginx_503_once_then_ok(legacy: TestServer) -> None:
    """The catalog answers nginx's HTML 503 page once per client, then 200."""
    status, headers, text = await call(legacy, "GET", "/api/catalog")
    second, _, _ = await call(legacy, "GET", "/api/catalog")
    assert (status, headers["Server"], text) == (503, "nginx/1.25.3", NGINX_503)
    assert headers["Content-Type"].startswith("text/html")
    assert "<center>nginx/1.25.3</center>" in text
    assert second == 200


@pytest.mark.parametrize(
    ("authorization", "challenge"),
    [
        (None, 'Bearer realm="orders"'),
        (
            "Bearer at_expired",
            'Bearer realm="orders", error="invalid_token", '
            'error_description="The access token expired"',
        ),
    ],
)
async def test_account_challenges_without_valid_token(
    legacy: TestServer, authorization: str | None, challenge: str
) -> None:
    """401 with an RFC 6750 challenge; invalid_token only when a token was sent."""
    headers = {"Authorization": authorization} if authorization else {}
    status, got, _ = await call(legacy, "GET", "/api/account", headers=headers)
    assert (status, got["WWW-Authenticate"]) == (401, challenge)


async def test_issued_token_opens_the_account(legacy: TestServer) -> None:
    """POST /auth/token with the demo credentials issues a bearer token the API accepts."""
    creds = {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET}
    status, _, text = await call(legacy, "POST", "/auth/token", json=creds)
    token = json.loads(text)["access_token"]
    account, _, _ = await call(
        legacy, "GET", "/api/account", headers={"Authorization": f"Bearer {token}"}
    )
    assert (status, account) == (200, 200)


async def test_token_endpoint_rejects_wrong_secret(legacy: TestServer) -> None:
    """Wrong client credentials get an OAuth invalid_client 401, no token."""
    status, _, text = await call(
        legacy, "POST", "/auth/token", json={"client_id": CLIENT_ID, "client_secret": "nope"}
    )
    assert (status, json.loads(text)["error"]) == (401, "invalid_client")


async def test_slow_report_is_fast_once_built(legacy: TestServer) -> None:
    """The first report call takes the configured time; after that it is served at once."""
    started = time.monotonic()
    first, _, _ = await call(legacy, "GET", "/api/reports/monthly")
    first_took = time.monotonic() - started
    started = time.monotonic()
    second, _, _ = await call(legacy, "GET", "/api/reports/monthly")
    second_took = time.monotonic() - started
    assert (first, second) == (200, 200)
    assert first_took >= 0.3
    assert second_took < 0.2


async def test_ship_succeeds_after_confirm(legacy: TestServer) -> None:
    """Shipping works once the same client confirmed the order."""
    confirmed, _, _ = await call(legacy, "POST", "/api/orders/17/confirm")
    shipped, _, text = await call(legacy, "POST", "/api/orders/17/ship")
    other_client, _, _ = await call(legacy, "POST", "/api/orders/17/ship", client="other")
    assert (confirmed, shipped, json.loads(text)["status"]) == (200, 200, "shipped")
    assert other_client == 409


async def test_state_forgets_the_oldest_clients(aiohttp_server: StartServer) -> None:
    """Per-client state is bounded: past max_remembered clients the oldest is forgotten."""
    server = await aiohttp_server(create_legacy_app(max_remembered=2))
    await call(server, "POST", "/api/orders/17/confirm", client="a")
    await call(server, "POST", "/api/orders/17/confirm", client="b")
    await call(server, "POST", "/api/orders/17/confirm", client="c")
    statuses = [(await call(server, "POST", "/api/orders/17/ship", client=c))[0] for c in "bc"]
    forgotten, _, _ = await call(server, "POST", "/api/orders/17/ship", client="a")
    assert (statuses, forgotten) == ([200, 200], 409)


# -- RFC 6901 -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("document", "pointer", "value", "expected"),
    [
        ({"qty": -1}, "/qty", 1, {"qty": 1}),
        ({}, "/qty", 1, {"qty": 1}),
        ({"a": {"b": 1}}, "/a/b", 2, {"a": {"b": 2}}),
        ({"items": [{"q": 0}]}, "/items/0/q", 5, {"items": [{"q": 5}]}),
        ({"items": [1]}, "/items/-", 2, {"items": [1, 2]}),
        ({"items": [1]}, "/items/1", 2, {"items": [1, 2]}),
        ({"a/b": 0}, "/a~1b", 1, {"a/b": 1}),
        ({"m~n": 0}, "/m~0n", 1, {"m~n": 1}),
        ({"~1": 0}, "/~01", 1, {"~1": 1}),
        ({"": 0}, "/", 1, {"": 1}),
        ({"x": 1}, "", {"y": 2}, {"y": 2}),
    ],
)
def test_set_pointer(document: Any, pointer: str, value: Any, expected: Any) -> None:
    """set_pointer writes at the RFC 6901 location, unescaping ~1 then ~0."""
    assert set_pointer(document, pointer, value) == expected


@pytest.mark.parametrize(
    ("document", "pointer"),
    [
        ({"a": 1}, "a"),  # must start with '/'
        ({"a": 1}, "/a~2"),  # bad escape
        ({}, "/a/b"),  # missing parent
        ({"a": [1]}, "/a/01"),  # leading zero
        ({"a": [1]}, "/a/5"),  # past the end
        ({"a": [1]}, "/a/x"),  # not an index
        ({"a": 1}, "/a/b"),  # scalar parent
        (None, "/a"),  # no document
    ],
)
def test_set_pointer_rejects(document: Any, pointer: str) -> None:
    """Malformed pointers and impossible locations raise PointerError."""
    with pytest.raises(PointerError):
        set_pointer(document, pointer, 1)


def test_set_pointer_does_not_mutate() -> None:
    """The input document is left as it was."""
    document = {"a": {"b": [1]}}
    set_pointer(document, "/a/b/0", 9)
    assert document == {"a": {"b": [1]}}


@pytest.mark.parametrize(
    ("pointer", "expected"),
    [("", {"a": [{"b": 1}]}), ("/a", [{"b": 1}]), ("/a/0/b", 1)],
)
def test_get_pointer(pointer: str, expected: Any) -> None:
    """get_pointer reads the value a pointer names."""
    assert get_pointer({"a": [{"b": 1}]}, pointer) == expected


# -- reading envelopes --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("envelope", "expected"),
    [
        pytest.param({"field": "/qty", "suggested_value": 1}, [Fix("/qty", 1)], id="suggested"),
        pytest.param(
            {
                "field": "/qty",
                "suggested_value": 1,
                "invalid_fields": [
                    {"field": "/qty", "received": -1, "allowed_values": {"minimum": 5}}
                ],
            },
            [Fix("/qty", 1, -1)],
            id="suggested-wins-for-its-field",
        ),
        pytest.param(
            {
                "invalid_fields": [
                    {"field": "/quantity", "allowed_values": {"minimum": 1}},
                    {"field": "/sku", "allowed_values": ["WIDGET-1", "WIDGET-2"]},
                ]
            },
            [Fix("/quantity", 1), Fix("/sku", "WIDGET-1")],
            id="per-field-allowed",
        ),
        pytest.param(
            {"invalid_fields": [{"field": "/n", "allowed_values": {"gt": 0}}]},
            [Fix("/n", 1)],
            id="exclusive-bound",
        ),
        pytest.param(
            {"invalid_fields": [{"field": "/c", "allowed_values": {"enum": ["x"]}}]},
            [Fix("/c", "x")],
            id="enum",
        ),
        pytest.param(
            {"invalid_fields": [{"field": "/a"}, {"field": "/b"}], "suggested_value": 3},
            [],
            id="ambiguous-suggestion",
        ),
        pytest.param({"field": None, "invalid_fields": []}, [], id="nothing"),
    ],
)
def test_plan_fixes(envelope: dict[str, Any], expected: list[Fix]) -> None:
    """Fixes come only from the envelope's field, invalid_fields, allowed and suggested values."""
    assert plan_fixes(envelope) == expected


@pytest.mark.parametrize(
    ("document", "fixes", "expected"),
    [
        ({"qty": -1}, [Fix("/qty", 1, -1)], {"qty": 1}),
        (
            {"query": "{ order(id: 17) { id totl } }"},
            [Fix("/query", "total", "totl")],
            {"query": "{ order(id: 17) { id total } }"},
        ),
        (
            {"query": "{ totals totl }"},
            [Fix("/query", "total", "totl")],
            {"query": "{ totals total }"},
        ),
        ({"name": "abc"}, [Fix("/name", "xyz", "abc")], {"name": "xyz"}),
        ({"name": "abc"}, [Fix("/name", "xyz", "q")], {"name": "xyz"}),
    ],
)
def test_apply_fixes(document: Any, fixes: list[Fix], expected: Any) -> None:
    """A rejected token inside a longer string is replaced as a word; otherwise the value is set."""
    assert apply_fixes(document, fixes) == expected


@pytest.mark.parametrize(
    ("operation", "args", "expected"),
    [
        (
            "POST /api/orders/17/confirm",
            {"order_id": "17"},
            Call("POST", "/api/orders/17/confirm", {"order_id": "17"}),
        ),
        (
            "POST /api/orders/{order_id}/confirm",
            {"order_id": 17},
            Call("POST", "/api/orders/17/confirm"),
        ),
        (
            "post /invoices/{{ id }}/finalize",
            {"id": "in_1", "force": True},
            Call("POST", "/invoices/in_1/finalize", {"force": True}),
        ),
        ("GET /api/orders/{id}", {"id": 3, "expand": "lines"}, Call("GET", "/api/orders/3")),
        ("confirm the order", None, None),
        ("POST https://elsewhere.example/x", None, None),
    ],
)
def test_parse_operation(
    operation: str, args: dict[str, Any] | None, expected: Call | None
) -> None:
    """next_operation + args -> a call on the same base URL; path placeholders are filled."""
    assert parse_operation(operation, args) == expected


# -- the agent against a fake mend ----------------------------------------------------------------


def _envelope(
    request: web.Request,
    status: int | None,
    code: str,
    action: str,
    *,
    http_status: int | None = None,
    **fields: Any,
) -> web.Response:
    category = fields.pop("category", "internal")
    retryable = action == "retry"
    if retryable:
        fields.setdefault("retry_after_ms", 50)
    envelope = Envelope(
        code=code,
        message=f"{code} (fake)",
        category=category,
        severity=Severity.FATAL if action in {"escalate", "report_bug"} else Severity.ERROR,
        retryable=retryable,
        action=Action(action),
        hint=f"{action} (fake)",
        request_id="req_fake",
        upstream_status=status,
        rule=f"fake.{code.lower()}",
        **fields,
    )
    return web.json_response(
        envelope_body(envelope), status=http_status or status or 502, headers={"X-Error-Code": code}
    )


def _fake_422(request: web.Request, status: int, body: Any, response: web.Response) -> web.Response:
    item = body["detail"][0]
    pointer = "/" + item["loc"][-1]
    return _envelope(
        request,
        status,
        "VALIDATION_FAILED",
        "fix_request",
        category="validation",
        field=pointer,
        suggested_value=1,
        invalid_fields=[{"field": pointer, "reason": item["msg"], "received": item["input"]}],
    )


def _fake_400(request: web.Request, status: int, body: Any, response: web.Response) -> web.Response:
    allowed = {"quantity": {"minimum": 1}, "sku": ["WIDGET-1", "WIDGET-2", "GADGET-9"]}
    return _envelope(
        request,
        status,
        "VALIDATION_FAILED",
        "fix_request",
        category="validation",
        invalid_fields=[
            {"field": f"/{k}", "reason": v[0], "allowed_values": allowed[k]}
            for k, v in body.items()
        ],
    )


def _fake_500(request: web.Request, status: int, body: Any, response: web.Response) -> web.Response:
    return _envelope(request, status, "INTERNAL_ERROR", "report_bug")


def _fake_429(request: web.Request, status: int, body: Any, response: web.Response) -> web.Response:
    return _envelope(
        request,
        status,
        "RATE_LIMITED",
        "retry",
        category="rate_limit",
        retry_after_ms=int(response.headers["Retry-After"]) * 1000,
    )


def _fake_503(request: web.Request, status: int, body: Any, response: web.Response) -> web.Response:
    return _envelope(request, status, "SERVICE_UNAVAILABLE", "retry", category="unavailable")


def _fake_401(request: web.Request, status: int, body: Any, response: web.Response) -> web.Response:
    return _envelope(request, status, "AUTHENTICATION_REQUIRED", "reauthenticate", category="auth")


def _fake_409(request: web.Request, status: int, body: Any, response: web.Response) -> web.Response:
    order_id = re.search(r"Order (\d+)", body["message"])
    assert order_id is not None
    return _envelope(
        request,
        status,
        "ORDER_NOT_CONFIRMED",
        "call_other_operation",
        category="precondition",
        next_operation=f"POST /api/orders/{order_id[1]}/confirm",
        next_operation_args={"order_id": order_id[1]},
    )


#: The envelope mend's rules would make of each status the legacy API answers with.
_FAKE_ENVELOPES: dict[int, Callable[[web.Request, int, Any, web.Response], web.Response]] = {
    422: _fake_422,
    400: _fake_400,
    500: _fake_500,
    429: _fake_429,
    503: _fake_503,
    401: _fake_401,
    409: _fake_409,
}


def _fake_tool_result(request: web.Request, status: int, body: Any) -> web.Response | None:
    """An MCP tool result with ``isError``: the envelope in its ``_meta``."""
    result = body.get("result") if isinstance(body, dict) else None
    if isinstance(result, dict) and result.get("isError") is True:  # an MCP tool result
        envelope = _envelope(
            request,
            status,
            "VALIDATION_FAILED",
            "fix_request",
            category="validation",
            field="/priority",
            suggested_value=5,
            invalid_fields=[{"field": "/priority", "reason": "at most 5", "received": 9}],
        )
        error = json.loads(envelope.text or "{}")["error"]
        meta = {"mend/error": error}
        answer = {"isError": True, "content": [{"type": "text", "text": "x"}], "_meta": meta}
        return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": answer})
    return None


def _fake_graphql(request: web.Request, status: int, body: Any) -> web.Response | None:
    """A GraphQL 200 with ``errors``: the unknown field it names, and the one it meant."""
    if status == 200 and isinstance(body, dict) and body.get("errors"):
        typo = re.search(r'field "(\w+)".*Did you mean "(\w+)"', body["errors"][0]["message"])
        assert typo is not None
        return _envelope(
            request,
            status,
            "GRAPHQL_VALIDATION_FAILED",
            "fix_request",
            category="validation",
            field="/query",
            suggested_value=typo[2],
            invalid_fields=[{"field": "/query", "reason": "unknown field", "received": typo[1]}],
        )
    return None


def _fake_mend_middleware(timeout_s: float) -> Any:
    """Turns the legacy API's errors into envelopes, the way mend's rules would, by hand."""

    @web.middleware
    async def fake_mend(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            response = await asyncio.wait_for(handler(request), timeout_s)
        except TimeoutError:
            return _envelope(
                request, None, "UPSTREAM_TIMEOUT", "retry", http_status=504, category="timeout"
            )
        assert isinstance(response, web.Response)
        status = response.status
        text = response.text or ""
        body: Any = json.loads(text) if response.content_type == "application/json" else None
        fake = _FAKE_ENVELOPES.get(status)
        if fake is not None:
            return fake(request, status, body, response)
        if (answered := _fake_tool_result(request, status, body)) is not None:
            return answered
        if (answered := _fake_graphql(request, status, body)) is not None:
            return answered
        return response

    return fake_mend


@pytest.fixture
async def fake_mend(aiohttp_server: StartServer) -> TestServer:
    """The legacy API behind a hand-written envelope translator, with a 0.2 s read timeout."""
    app = create_legacy_app(retry_after_s=1, slow_seconds=0.3)
    app.middlewares.append(_fake_mend_middleware(timeout_s=0.2))
    return await aiohttp_server(app)


async def test_agent_through_envelopes_completes_all_but_the_bug(fake_mend: TestServer) -> None:
    """Following envelope actions completes every task except the server bug, which escalates."""
    report = await run_agent(base_url(fake_mend), "mend")
    outcomes = {r.kind: r.outcome for r in report.results}
    assert outcomes == {task.kind: "completed" for task in default_tasks()} | {
        "Spring 500": "escalated"
    }


async def test_agent_raw_only_retries_blindly(legacy: TestServer) -> None:
    """Against the raw API only the failures that fix themselves on a resend get done."""
    report = await run_agent(base_url(legacy), "raw")
    completed = {r.kind for r in report.results if r.outcome == "completed"}
    assert completed == {"nginx 503", "slow upstream"}
    assert all(r.attempts <= 2 for r in report.results)


async def test_agent_raw_ignores_envelopes(fake_mend: TestServer) -> None:
    """In raw mode the agent does not act on an envelope even when one arrives."""
    report = await run_agent(base_url(fake_mend), "raw")
    ship = next(r for r in report.results if r.kind == "409 precondition")
    assert (ship.outcome, ship.attempts) == ("failed", 2)
    assert not any("confirm" in step for step in ship.trail)


async def _always(aiohttp_server: StartServer, action: str, **fields: Any) -> tuple[str, list[int]]:
    hits: list[int] = []

    async def handler(request: web.Request) -> web.Response:
        hits.append(1)
        return _envelope(request, 503, "SOMETHING", action, category="unavailable", **fields)

    app = web.Application()
    app.router.add_get("/x", handler)
    server = await aiohttp_server(app)
    return base_url(server), hits


@pytest.mark.parametrize(
    ("action", "fields", "outcome", "requests"),
    [
        ("retry", {"retry_after_ms": 10}, "failed", 3),
        ("escalate", {}, "escalated", 1),
        ("report_bug", {}, "escalated", 1),
        ("fix_request", {}, "failed", 1),
        ("call_other_operation", {"next_operation": "do the thing"}, "failed", 1),
    ],
)
async def test_agent_bounds_and_stops(
    aiohttp_server: StartServer,
    action: str,
    fields: dict[str, Any],
    outcome: str,
    requests: int,
) -> None:
    """Attempts are bounded; escalation and unusable instructions stop at once."""
    url, hits = await _always(aiohttp_server, action, **fields)
    task = Task("t", "k", Call("GET", "/x"), lambda reply: reply.status == 200)
    report = await run_agent(url, "mend", tasks=[task], settings=AgentSettings(max_attempts=3))
    assert (report.results[0].outcome, len(hits)) == (outcome, requests)


async def test_agent_waits_retry_after_ms(aiohttp_server: StartServer) -> None:
    """On retry the agent waits retry_after_ms before resending."""
    url, hits = await _always(aiohttp_server, "retry", retry_after_ms=300)
    task = Task("t", "k", Call("GET", "/x"), lambda reply: reply.status == 200)
    started = time.monotonic()
    await run_agent(url, "mend", tasks=[task], settings=AgentSettings(max_attempts=2))
    assert len(hits) == 2
    assert time.monotonic() - started >= 0.3


async def test_agent_refuses_excessive_wait(aiohttp_server: StartServer) -> None:
    """A retry_after_ms beyond the agent's patience ends the task instead of stalling it."""
    url, hits = await _always(aiohttp_server, "retry", retry_after_ms=600_000)
    task = Task("t", "k", Call("GET", "/x"), lambda reply: reply.status == 200)
    report = await run_agent(url, "mend", tasks=[task])
    assert (report.results[0].outcome, len(hits)) == ("failed", 1)


# -- with the real mend ---------------------------------------------------------------------------

DEMO_DIR = REPO / "demo"


async def test_demo_rule_turns_409_into_a_plan(legacy: TestServer, start_mend: Any) -> None:
    """Through real mend, demo/rules.yaml turns order_not_confirmed into call_other_operation."""
    # Without the shipped packs: this is about demo/rules.yaml alone.
    mend = await start_mend(
        legacy, route={"rules": (DEMO_DIR / "rules.yaml",)}, default_packs=False
    )
    resp = await mend.client.post("/api/orders/42/ship", headers={"Accept": "application/json"})
    error = (await resp.json())["error"]
    assert (resp.status, resp.headers["X-Error-Code"]) == (409, "ORDER_NOT_CONFIRMED")
    assert (error["action"], error["rule"]) == ("call_other_operation", "demo.order_not_confirmed")
    assert error["next_operation"] == "POST /api/orders/42/confirm"
    assert error["next_operation_args"] == {"order_id": "42"}


def test_compose_config_is_valid() -> None:
    """demo/mend.yaml (docker-compose's mend config) passes ``mend check``."""
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "check", "--config", str(DEMO_DIR / "mend.yaml")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


# -- end to end ---------------------------------------------------------------------------------

needs_proxy = pytest.mark.skipif(
    not (
        (REPO / "proxy" / "tools" / "cli.py").exists()
        and (REPO / "proxy" / "runtime" / "app.py").exists()
    ),
    reason="the proxy core (proxy/tools/cli.py, proxy/runtime/app.py) has not landed",
)
RATE = re.compile(
    r"completion rate: raw (\d+)% \((\d+)/(\d+)\), through mend (\d+)% \((\d+)/(\d+)\)"
)


@needs_proxy
def test_demo_run_raises_completion_rate() -> None:
    """``python -m demo.run`` runs mend for real and the agent completes more through it."""
    done = subprocess.run(
        [sys.executable, "-m", "demo.run"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    match = RATE.search(done.stdout)
    assert match is not None, done.stdout
    raw_done, mend_done = int(match[2]), int(match[5])
    assert mend_done > raw_done, done.stdout
    assert "mend_errors_total{" in done.stdout
    # Envelopes are printed after "through mend:"; none of them may carry the upstream's secrets.
    mended = "\n".join(
        re.findall(r"through mend: HTTP.*?(?=\n\(\d\)|\n\n\d\.)", done.stdout, re.DOTALL)
    )
    assert mended
    assert "Winter2026" not in mended
    assert "orders-db-01" not in mended


@needs_proxy
def test_demo_traffic_mode_generates_requests() -> None:
    """``--requests N`` loops the agent through mend and mend counts the errors it rewrote."""
    done = subprocess.run(
        [sys.executable, "-m", "demo.run", "--requests", "20"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"round 1: through mend .* \d+ requests", done.stdout), done.stdout
    assert "1. The same failing request" not in done.stdout
    assert "mend_errors_total{" in done.stdout
