"""A small legacy "orders" API that fails the way real ones do.

Each endpoint imitates one framework's native error shape byte for byte where it matters (Spring
Boot's error JSON with a stack trace, DRF field errors, FastAPI 422s, an nginx HTML page, GraphQL
errors in a 200, an MCP tool result with ``isError`` and FastMCP's pydantic text, an RFC 6750
bearer challenge, a 429 with ``Retry-After``), and each one succeeds
once it is called the right way. That is what lets the demo measure something: an agent that
understands the error can finish the task, one that only sees the raw response mostly cannot.

State is scoped per client (``X-Client-Id``, else the peer address) so that several demo agents,
or a raw run and a run through mend, never see each other's counters.

    python -m demo.legacy_api --host 0.0.0.0 --port 9000
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

#: Credentials that ``POST /auth/token`` accepts; the demo agent is configured with them.
CLIENT_ID = "demo-agent"
CLIENT_SECRET = "demo-secret"

SKU_CHOICES = ("WIDGET-1", "WIDGET-2", "GADGET-9")
ORDER_FIELDS = ("id", "total", "status", "sku", "qty", "currency")

NGINX_503 = (
    "<html>\r\n"
    "<head><title>503 Service Temporarily Unavailable</title></head>\r\n"
    "<body>\r\n"
    "<center><h1>503 Service Temporarily Unavailable</h1></center>\r\n"
    "<hr><center>nginx/1.25.3</center>\r\n"
    "</body>\r\n"
    "</html>\r\n"
)

# The kind of leak mend exists to stop: SQL text, an internal host and a password in a JDBC URL.
SPRING_MESSAGE = (
    "PreparedStatementCallback; bad SQL grammar [SELECT i.id, i.totl, i.currency FROM invoices i "
    "WHERE i.order_id = ?]; nested exception is org.postgresql.util.PSQLException: ERROR: column "
    "i.totl does not exist (datasource jdbc:postgresql://orders-db-01.prod.internal:5432/orders"
    "?user=orders_svc&password=Winter2026!)"
)
SPRING_TRACE = (
    "org.springframework.jdbc.BadSqlGrammarException: PreparedStatementCallback; bad SQL grammar "
    "[SELECT i.id, i.totl, i.currency FROM invoices i WHERE i.order_id = ?]\n"
    "\tat org.springframework.jdbc.support.SQLStateSQLExceptionTranslator.doTranslate"
    "(SQLStateSQLExceptionTranslator.java:101)\n"
    "\tat org.springframework.jdbc.core.JdbcTemplate.translateException(JdbcTemplate.java:1575)\n"
    "\tat org.springframework.jdbc.core.JdbcTemplate.query(JdbcTemplate.java:732)\n"
    "\tat com.acme.orders.invoice.InvoiceRepository.findByOrderId(InvoiceRepository.java:48)\n"
    "\tat com.acme.orders.invoice.InvoiceService.render(InvoiceService.java:88)\n"
    "\tat com.acme.orders.web.OrderController.invoice(OrderController.java:142)\n"
    "\tat java.base/jdk.internal.reflect.DirectMethodHandleAccessor.invoke"
    "(DirectMethodHandleAccessor.java:103)\n"
    "\tat org.apache.catalina.core.ApplicationFilterChain.doFilter"
    "(ApplicationFilterChain.java:166)\n"
    "\tat java.base/java.lang.Thread.run(Thread.java:840)\n"
    "Caused by: org.postgresql.util.PSQLException: ERROR: column i.totl does not exist\n"
    "  Position: 13\n"
    "\tat org.postgresql.core.v3.QueryExecutorImpl.receiveErrorResponse"
    "(QueryExecutorImpl.java:2713)\n"
    "\t... 58 more\n"
)
TOMCAT_HEADERS = {
    "Server": "Apache-Tomcat/9.0.83",
    "X-Powered-By": "Servlet/4.0 JSP/2.3 (Apache Tomcat/9.0.83 Java/Eclipse Adoptium/17.0.9)",
}


@dataclass
class RateWindow:
    calls: int = 0
    blocked_until: float = 0.0


@dataclass
class ClientState:
    """What the API remembers about one client."""

    rate: dict[str, RateWindow] = field(default_factory=dict)
    catalog_failed: bool = False
    reports_ready_at: dict[str, float] = field(default_factory=dict)
    confirmed: set[int] = field(default_factory=set)


@dataclass
class LegacyState:
    """Everything the API remembers; lives on the app so each app (and test) starts clean."""

    rate_limit_calls: int = 1
    retry_after_s: int = 2
    slow_seconds: float = 3.0
    #: The compose agent uses a fresh client id every round, for days; forget the oldest.
    max_remembered: int = 10_000
    tokens: dict[str, None] = field(default_factory=dict)
    clients: dict[str, ClientState] = field(default_factory=dict)
    orders_created: int = 0

    def client(self, client_id: str) -> ClientState:
        state = self.clients.get(client_id)
        if state is None:
            state = self.clients[client_id] = ClientState()
            _forget_oldest(self.clients, self.max_remembered)
        return state

    def add_token(self, token: str) -> None:
        self.tokens[token] = None
        _forget_oldest(self.tokens, self.max_remembered)


def _forget_oldest(remembered: dict[str, Any], limit: int) -> None:
    while len(remembered) > limit:
        del remembered[next(iter(remembered))]


STATE = web.AppKey("legacy_state", LegacyState)


def _state(request: web.Request) -> LegacyState:
    return request.app[STATE]


def _client(request: web.Request) -> ClientState:
    """The caller's state, by ``X-Client-Id`` or else the peer address."""
    client_id = request.headers.get("X-Client-Id") or request.remote or "anonymous"
    return _state(request).client(client_id)


def _now() -> float:
    return asyncio.get_running_loop().time()


async def _json_body(request: web.Request) -> tuple[Any, str | None]:
    """The parsed JSON body, or the decode error's message."""
    raw = await request.text()
    try:
        return json.loads(raw), None
    except json.JSONDecodeError as exc:
        return None, exc.msg


def _int_like(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    return None


# -- index / health ---------------------------------------------------------------------------


async def index(request: web.Request) -> web.Response:
    return web.json_response(
        {
            "service": "legacy orders API (mend demo)",
            "endpoints": {
                "POST /auth/token": "OAuth-ish token for client_id/client_secret",
                "GET /api/account": "needs a bearer token (401 + WWW-Authenticate otherwise)",
                "POST /api/orders": "FastAPI-style 422 unless qty > 0",
                "POST /api/drf/orders": "DRF-style 400 field errors unless sku/quantity are valid",
                "GET /api/orders/{id}/invoice": "Spring Boot 500 with a stack trace (a real bug)",
                "GET /api/orders/{id}/tracking": "429 with Retry-After on the first call",
                "GET /api/catalog": "nginx 503 HTML page once, then 200",
                "GET /api/reports/{name}": "slow on the first call (cold cache)",
                "POST /api/orders/{id}/confirm": "confirms an order",
                "POST /api/orders/{id}/ship": "409 until the order was confirmed",
                "POST /graphql": "GraphQL; errors arrive inside a 200",
                "POST /mcp": "MCP tool create_ticket; priority above 5 is an isError result",
            },
        }
    )


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


# -- auth (RFC 6749 client credentials, RFC 6750 bearer challenge) ----------------------------


async def issue_token(request: web.Request) -> web.Response:
    if request.content_type == "application/json":
        body, _ = await _json_body(request)
        creds = body if isinstance(body, dict) else {}
    else:
        creds = dict(await request.post())
    if creds.get("client_id") != CLIENT_ID or creds.get("client_secret") != CLIENT_SECRET:
        return web.json_response(
            {"error": "invalid_client", "error_description": "Client authentication failed."},
            status=401,
            headers={"WWW-Authenticate": 'Basic realm="orders"'},
        )
    token = "at_" + secrets.token_hex(16)
    _state(request).add_token(token)
    return web.json_response(
        {"access_token": token, "token_type": "Bearer", "expires_in": 3600},
        headers={"Cache-Control": "no-store"},
    )


async def account(request: web.Request) -> web.Response:
    auth = request.headers.get("Authorization", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() == "bearer" and token.strip() in _state(request).tokens:
        return web.json_response({"id": "acct_1042", "name": "Acme Corp", "plan": "business"})
    if not auth:
        # RFC 6750 §3.1: no error code when the request carried no credentials at all.
        challenge = 'Bearer realm="orders"'
        body = {"error": "unauthorized", "error_description": "Authentication required."}
    else:
        challenge = (
            'Bearer realm="orders", error="invalid_token", '
            'error_description="The access token expired"'
        )
        body = {"error": "invalid_token", "error_description": "The access token expired"}
    return web.json_response(body, status=401, headers={"WWW-Authenticate": challenge})


# -- FastAPI / pydantic v2 --------------------------------------------------------------------


async def create_order_fastapi(request: web.Request) -> web.Response:
    headers = {"Server": "uvicorn"}
    body, decode_error = await _json_body(request)
    if decode_error is not None:
        detail: list[dict[str, Any]] = [
            {
                "type": "json_invalid",
                "loc": ["body", 0],
                "msg": "JSON decode error",
                "input": {},
                "ctx": {"error": decode_error},
            }
        ]
        return web.json_response({"detail": detail}, status=422, headers=headers)
    if not isinstance(body, dict):
        detail = [
            {
                "type": "model_attributes_type",
                "loc": ["body"],
                "msg": "Input should be a valid dictionary or object to extract fields from",
                "input": body,
            }
        ]
        return web.json_response({"detail": detail}, status=422, headers=headers)
    detail = []
    sku = body.get("sku")
    if sku is None:
        detail.append(
            {"type": "missing", "loc": ["body", "sku"], "msg": "Field required", "input": body}
        )
    elif not isinstance(sku, str):
        detail.append(
            {
                "type": "string_type",
                "loc": ["body", "sku"],
                "msg": "Input should be a valid string",
                "input": sku,
            }
        )
    qty_raw = body.get("qty")
    qty = _int_like(qty_raw)
    if qty_raw is None:
        detail.append(
            {"type": "missing", "loc": ["body", "qty"], "msg": "Field required", "input": body}
        )
    elif qty is None:
        detail.append(
            {
                "type": "int_parsing",
                "loc": ["body", "qty"],
                "msg": "Input should be a valid integer, unable to parse string as an integer",
                "input": qty_raw,
            }
        )
    elif qty <= 0:
        detail.append(
            {
                "type": "greater_than",
                "loc": ["body", "qty"],
                "msg": "Input should be greater than 0",
                "input": qty_raw,
                "ctx": {"gt": 0},
            }
        )
    if detail:
        return web.json_response({"detail": detail}, status=422, headers=headers)
    state = _state(request)
    state.orders_created += 1
    return web.json_response(
        {"id": state.orders_created, "sku": sku, "qty": qty, "status": "pending"},
        status=201,
        headers=headers,
    )


# -- Django REST framework --------------------------------------------------------------------


async def create_order_drf(request: web.Request) -> web.Response:
    headers = {
        "Server": "gunicorn",
        "Allow": "POST, OPTIONS",
        "Vary": "Accept, Cookie",
        "X-Frame-Options": "DENY",
    }
    body, decode_error = await _json_body(request)
    if decode_error is not None:
        return web.json_response(
            {"detail": f"JSON parse error - {decode_error}"}, status=400, headers=headers
        )
    if not isinstance(body, dict):
        return web.json_response(
            {"non_field_errors": ["Invalid data. Expected a dictionary, but got list."]},
            status=400,
            headers=headers,
        )
    errors: dict[str, list[str]] = {}
    quantity_raw = body.get("quantity")
    quantity = _int_like(quantity_raw)
    if quantity_raw is None:
        errors["quantity"] = ["This field is required."]
    elif quantity is None:
        errors["quantity"] = ["A valid integer is required."]
    elif quantity < 1:
        errors["quantity"] = ["Ensure this value is greater than or equal to 1."]
    sku = body.get("sku")
    if sku is None:
        errors["sku"] = ["This field is required."]
    elif sku not in SKU_CHOICES:
        errors["sku"] = [f'"{sku}" is not a valid choice.']
    if errors:
        return web.json_response(errors, status=400, headers=headers)
    state = _state(request)
    state.orders_created += 1
    return web.json_response(
        {"id": state.orders_created, "sku": sku, "quantity": quantity, "status": "pending"},
        status=201,
        headers=headers,
    )


# -- Spring Boot ------------------------------------------------------------------------------


async def invoice(request: web.Request) -> web.Response:
    # A genuine bug (a typo'd column): no request the agent can send will make this succeed.
    body = {
        "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "status": 500,
        "error": "Internal Server Error",
        "trace": SPRING_TRACE,
        "message": SPRING_MESSAGE,
        "path": request.path,
    }
    return web.json_response(body, status=500, headers=TOMCAT_HEADERS)


# -- rate limit -------------------------------------------------------------------------------


async def tracking(request: web.Request) -> web.Response:
    state = _state(request)
    window = _client(request).rate.setdefault("tracking", RateWindow())
    now = _now()
    window.calls += 1
    if window.calls <= state.rate_limit_calls:
        window.blocked_until = now + state.retry_after_s
    if now < window.blocked_until:
        wait = max(1, round(window.blocked_until - now))
        return web.json_response(
            {
                "error": "rate_limit_exceeded",
                "message": f"API rate limit exceeded. Try again in {wait} seconds.",
            },
            status=429,
            headers={
                "Retry-After": str(wait),
                "X-RateLimit-Limit": str(state.rate_limit_calls),
                "X-RateLimit-Remaining": "0",
            },
        )
    order_id = int(request.match_info["order_id"])
    return web.json_response({"order_id": order_id, "carrier": "DHL", "status": "in_transit"})


# -- nginx in front of a restarting backend ---------------------------------------------------


async def catalog(request: web.Request) -> web.Response:
    client = _client(request)
    if not client.catalog_failed:
        client.catalog_failed = True
        return web.Response(
            text=NGINX_503,
            status=503,
            content_type="text/html",
            headers={"Server": "nginx/1.25.3"},
        )
    products = [{"sku": sku, "name": sku.title().replace("-", " ")} for sku in SKU_CHOICES]
    return web.json_response({"products": products})


# -- slow report (cold cache) -----------------------------------------------------------------


async def report(request: web.Request) -> web.Response:
    state = _state(request)
    name = request.match_info["name"]
    # The report keeps building after a caller gives up, like a real cache warm-up: the deadline
    # is set by the first call, not restarted by each one.
    ready_at = _client(request).reports_ready_at.setdefault(name, _now() + state.slow_seconds)
    delay = ready_at - _now()
    if delay > 0:
        await asyncio.sleep(delay)
    return web.json_response({"report": name, "rows": [{"month": "2026-10", "orders": 412}]})


# -- precondition -----------------------------------------------------------------------------


async def confirm(request: web.Request) -> web.Response:
    order_id = int(request.match_info["order_id"])
    _client(request).confirmed.add(order_id)
    return web.json_response({"id": order_id, "status": "confirmed"})


async def ship(request: web.Request) -> web.Response:
    order_id = int(request.match_info["order_id"])
    if order_id not in _client(request).confirmed:
        return web.json_response(
            {
                "error": "order_not_confirmed",
                "message": f"Order {order_id} must be confirmed before shipping.",
            },
            status=409,
        )
    return web.json_response({"id": order_id, "status": "shipped"})


# -- GraphQL (errors inside a 200, as graphql-js servers answer validation failures) ----------

_ORDER_QUERY = re.compile(
    r"order\s*\(\s*id\s*:\s*\"?(?P<id>\d+)\"?\s*\)\s*\{(?P<fields>[^{}]*)\}", re.DOTALL
)


def _location(query: str, offset: int) -> dict[str, int]:
    line = query.count("\n", 0, offset) + 1
    column = offset - (query.rfind("\n", 0, offset) + 1) + 1
    return {"line": line, "column": column}


async def graphql(request: web.Request) -> web.Response:
    body, _ = await _json_body(request)
    query = body.get("query") if isinstance(body, dict) else None
    if not isinstance(query, str):
        return web.json_response(
            {
                "errors": [
                    {"message": "Must provide query string.", "extensions": {"code": "BAD_REQUEST"}}
                ]
            },
            status=400,
        )
    match = _ORDER_QUERY.search(query)
    if match is None:
        return web.json_response(
            {
                "data": None,
                "errors": [
                    {
                        "message": 'Syntax Error: Expected "order(id: ...) { ... }".',
                        "extensions": {"code": "GRAPHQL_PARSE_FAILED"},
                    }
                ],
            }
        )
    errors: list[dict[str, Any]] = []
    selected: list[str] = []
    fields_start = match.start("fields")
    for name_match in re.finditer(r"\w+", match.group("fields")):
        name = name_match.group(0)
        if name in ORDER_FIELDS:
            selected.append(name)
            continue
        message = f'Cannot query field "{name}" on type "Order".'
        close = difflib.get_close_matches(name, ORDER_FIELDS, n=1)
        if close:
            message += f' Did you mean "{close[0]}"?'
        errors.append(
            {
                "message": message,
                "locations": [_location(query, fields_start + name_match.start())],
                "extensions": {"code": "GRAPHQL_VALIDATION_FAILED"},
            }
        )
    if errors:
        return web.json_response({"data": None, "errors": errors})
    order_id = int(match.group("id"))
    order = {
        "id": str(order_id),
        "total": 42.5,
        "status": "confirmed",
        "sku": "WIDGET-1",
        "qty": 2,
        "currency": "EUR",
    }
    return web.json_response({"data": {"order": {k: order[k] for k in selected}}})


# -- MCP (streamable HTTP, JSON answers, stateless), answering as the Python SDK's FastMCP does -

MCP_PROTOCOL_VERSION = "2025-06-18"
_TICKET_TOOL = {
    "name": "create_ticket",
    "description": "File a support ticket. priority is 1 (low) to 5 (urgent).",
    "inputSchema": {
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "priority": {"type": "integer", "minimum": 1, "maximum": 5},
        },
        "required": ["title", "priority"],
    },
}


def _pydantic_text(tool: str, field: str, message: str, kind: str, value: Any) -> str:
    """The text FastMCP puts in an ``isError`` result when pydantic rejects an argument."""
    return (
        f"Error executing tool {tool}: 1 validation error for {tool}Arguments\n{field}\n"
        f"  {message} [type={kind}, input_value={value!r}, input_type={type(value).__name__}]\n"
        f"    For further information visit https://errors.pydantic.dev/2.11/v/{kind}"
    )


def _tool_result(text: str, *, error: bool) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": error}


def _create_ticket(arguments: dict[str, Any]) -> dict[str, Any]:
    priority = arguments.get("priority")
    if not isinstance(priority, int) or isinstance(priority, bool):
        text = _pydantic_text(
            "create_ticket",
            "priority",
            "Input should be a valid integer",
            "int_type",
            priority,
        )
        return _tool_result(text, error=True)
    if priority > 5:
        text = _pydantic_text(
            "create_ticket",
            "priority",
            "Input should be less than or equal to 5",
            "less_than_equal",
            priority,
        )
        return _tool_result(text, error=True)
    return _tool_result(
        f"ticket T-{secrets.randbelow(9000) + 1000} filed: {arguments.get('title')}", error=False
    )


async def mcp(request: web.Request) -> web.Response:
    body, _ = await _json_body(request)
    if not isinstance(body, dict) or body.get("jsonrpc") != "2.0":
        error = {"code": -32600, "message": "Invalid Request"}
        return web.json_response({"jsonrpc": "2.0", "id": None, "error": error}, status=400)
    method, call_id = body.get("method"), body.get("id")
    if "id" not in body:
        return web.Response(status=202)  # a notification
    given = body.get("params")
    params: dict[str, Any] = given if isinstance(given, dict) else {}
    result: dict[str, Any]
    if method == "initialize":
        result = {
            "protocolVersion": MCP_PROTOCOL_VERSION,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "legacy-support", "version": "1.0"},
        }
    elif method == "tools/list":
        result = {"tools": [_TICKET_TOOL]}
    elif method == "tools/call" and params.get("name") == "create_ticket":
        arguments = params.get("arguments")
        result = _create_ticket(arguments if isinstance(arguments, dict) else {})
    elif method == "tools/call":
        result = _tool_result(f"Unknown tool: {params.get('name')}", error=True)
    else:
        error = {"code": -32601, "message": "Method not found"}
        return web.json_response({"jsonrpc": "2.0", "id": call_id, "error": error})
    return web.json_response({"jsonrpc": "2.0", "id": call_id, "result": result})


def create_legacy_app(
    *,
    rate_limit_calls: int = 1,
    retry_after_s: int = 2,
    slow_seconds: float = 3.0,
    max_remembered: int = 10_000,
) -> web.Application:
    """The orders API. ``slow_seconds`` should exceed mend's read timeout to show a timeout."""
    app = web.Application()
    app[STATE] = LegacyState(
        rate_limit_calls=rate_limit_calls,
        retry_after_s=retry_after_s,
        slow_seconds=slow_seconds,
        max_remembered=max_remembered,
    )
    app.router.add_get("/", index)
    app.router.add_get("/healthz", healthz)
    app.router.add_post("/auth/token", issue_token)
    app.router.add_get("/api/account", account)
    app.router.add_post("/api/orders", create_order_fastapi)
    app.router.add_post("/api/drf/orders", create_order_drf)
    app.router.add_get(r"/api/orders/{order_id:\d+}/invoice", invoice)
    app.router.add_get(r"/api/orders/{order_id:\d+}/tracking", tracking)
    app.router.add_post(r"/api/orders/{order_id:\d+}/confirm", confirm)
    app.router.add_post(r"/api/orders/{order_id:\d+}/ship", ship)
    app.router.add_get("/api/catalog", catalog)
    app.router.add_get("/api/reports/{name}", report)
    app.router.add_post("/graphql", graphql)
    app.router.add_post("/mcp", mcp)
    return app


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m demo.legacy_api", description="The mend demo's legacy orders API."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument(
        "--slow-seconds",
        type=float,
        default=3.0,
        help="how long the first GET /api/reports/{name} takes (default 3)",
    )
    parser.add_argument(
        "--rate-limit-calls",
        type=int,
        default=1,
        help="calls per client answered 429 before the limit lifts (default 1)",
    )
    parser.add_argument(
        "--retry-after", type=int, default=2, help="Retry-After seconds on the 429 (default 2)"
    )
    args = parser.parse_args(argv)
    app = create_legacy_app(
        rate_limit_calls=args.rate_limit_calls,
        retry_after_s=args.retry_after,
        slow_seconds=args.slow_seconds,
    )
    web.run_app(app, host=args.host, port=args.port)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
