"""GraphQL through mend with a real Strawberry server (graphql-core) on loopback.

The server runs in debug mode, Apollo style: each resolver error carries
``extensions.stacktrace`` and ``extensions.exception``. Whatever happens, the agent gets a GraphQL
response (``data`` as sent, ``errors`` with ``path`` and ``locations``) with no trace, file path
or secret in it.
"""

from __future__ import annotations

import enum
import json
import traceback
from typing import Any

import strawberry
from aiohttp import web
from strawberry.aiohttp.views import GraphQLView
from strawberry.http import GraphQLHTTPResponse
from strawberry.types import ExecutionResult

from tests.conftest import Mend, StartMend, StartUpstream
from tests.runtime.test_app import free_port

SECRET = "postgres://admin:Pl4ntedSecret@db.internal:5432/orders"
LEAKS = ("Pl4ntedSecret", "db.internal", "Traceback", "resolvers.py", "stacktrace", "/srv/")


@strawberry.enum
class OrderStatus(enum.Enum):
    PENDING = "pending"
    SHIPPED = "shipped"


@strawberry.type
class Order:
    id: int
    total: float

    @strawberry.field
    def customer(self) -> str | None:
        raise RuntimeError(f"customer lookup failed on {SECRET} (/srv/app/resolvers.py:12)")


@strawberry.type
class Query:
    @strawberry.field
    def order(self, id: int) -> Order:
        return Order(id=id, total=9.5)

    @strawberry.field
    def orders(self, status: OrderStatus, limit: int = 10) -> list[Order]:
        return [Order(id=1, total=2.0)][:limit]

    @strawberry.field
    def report(self) -> str:
        raise ValueError(f"report builder crashed: {SECRET} at /srv/app/reports.py:88")


class DebugView(GraphQLView):
    """Strawberry's view, answering errors the way Apollo Server does in development."""

    async def process_result(
        self, request: web.Request, result: ExecutionResult
    ) -> GraphQLHTTPResponse:
        document = await super().process_result(request, result)
        for formatted, error in zip(document.get("errors") or [], result.errors or [], strict=True):
            original = error.original_error
            if original is not None:
                trace = traceback.format_exception(original)
                formatted["extensions"] = {  # type: ignore[index]
                    "code": "INTERNAL_SERVER_ERROR",
                    "stacktrace": [line for part in trace for line in part.splitlines()],
                    "exception": {"message": str(original), "file": "/srv/app/resolvers.py"},
                }
        return document


async def start(start_upstream: StartUpstream, start_mend: StartMend) -> tuple[Mend, str]:
    view = DebugView(schema=strawberry.Schema(query=Query), graphql_ide=None)
    upstream = await start_upstream({"/graphql": view})
    return await start_mend(upstream), str(upstream.make_url("/graphql"))


async def ask(mend: Mend, query: str, variables: dict[str, Any] | None = None) -> Any:
    body: dict[str, Any] = {"query": query}
    if variables is not None:
        body["variables"] = variables
    resp = await mend.client.post("/graphql", json=body)
    raw = await resp.read()
    for leaked in LEAKS:
        assert leaked.encode() not in raw, leaked
    document = json.loads(raw)
    assert_graphql_response(document)
    return document


def assert_graphql_response(document: Any) -> None:
    """The GraphQL-over-HTTP response shape: ``data`` and/or a list of errors with messages."""
    assert isinstance(document, dict)
    assert set(document) <= {"data", "errors", "extensions"}
    for error in document.get("errors", []):
        assert isinstance(error["message"], str)
        assert set(error) <= {"message", "locations", "path", "extensions"}
        assert set(error["extensions"]) == {"code", "mend"}
        assert error["extensions"]["code"] == error["extensions"]["mend"]["code"]


async def test_a_resolver_error_without_data_is_an_error(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A failing root field (data null): the error keeps path and locations, loses the trace,
    and says report_bug at severity fatal."""
    mend, _ = await start(start_upstream, start_mend)
    document = await ask(mend, "{ report }")
    assert document["data"] is None
    error = document["errors"][0]
    assert error["path"] == ["report"]
    assert error["locations"] == [{"line": 1, "column": 3}]
    envelope = error["extensions"]["mend"]
    assert (envelope["code"], envelope["severity"]) == ("GRAPHQL_FIELD_ERROR", "fatal")
    assert error["message"] == envelope["message"]


async def test_partial_success_keeps_its_data_and_is_a_warning(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A failing nullable field beside good ones: data exactly as the server sent it, the error
    a warning at the field's path."""
    mend, url = await start(start_upstream, start_mend)
    query = "{ order(id: 7) { id total customer } }"
    direct = await (await mend.client.session.post(url, json={"query": query})).json()
    document = await ask(mend, query)
    assert (
        document["data"] == direct["data"] == {"order": {"id": 7, "total": 9.5, "customer": None}}
    )
    error = document["errors"][0]
    assert error["path"] == ["order", "customer"]
    assert error["extensions"]["mend"]["severity"] == "warning"
    assert "order.customer" in error["message"]


async def test_a_variable_of_the_wrong_type_points_at_the_variable(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """``$id: Int!`` given "x": VALIDATION_FAILED at /variables/id, with what was sent."""
    mend, _ = await start(start_upstream, start_mend)
    document = await ask(mend, "query($id: Int!) { order(id: $id) { id } }", {"id": "x"})
    envelope = document["errors"][0]["extensions"]["mend"]
    assert envelope["code"] == "VALIDATION_FAILED"
    assert envelope["field"] == "/variables/id"
    assert envelope["action"] == "fix_request"


async def test_an_enum_variable_gets_the_value_to_send(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """An enum variable with a near miss: /variables/status, the suggested value SHIPPED."""
    mend, _ = await start(start_upstream, start_mend)
    query = "query($status: OrderStatus!) { orders(status: $status) { id } }"
    document = await ask(mend, query, {"status": "SHIPPEDX"})
    envelope = document["errors"][0]["extensions"]["mend"]
    assert envelope["field"] == "/variables/status"
    assert envelope["suggested_value"] == "SHIPPED"
    assert envelope["invalid_fields"][0]["received"] == "SHIPPEDX"


async def test_a_missing_argument_points_at_the_argument(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A required argument left out: the pointer names the field and the argument."""
    mend, _ = await start(start_upstream, start_mend)
    document = await ask(mend, "{ order { id } }")
    envelope = document["errors"][0]["extensions"]["mend"]
    assert envelope["field"] == "/query/order/id"


async def test_an_unknown_field_gets_the_servers_suggestion(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """``totl`` on Order: GRAPHQL_VALIDATION_FAILED with suggested_value ``total``."""
    mend, _ = await start(start_upstream, start_mend)
    document = await ask(mend, "{ order(id: 1) { id totl } }")
    error = document["errors"][0]
    assert error["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
    assert error["extensions"]["mend"]["suggested_value"] == "total"
    assert error["locations"]


async def test_a_get_query_is_answered_as_graphql(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """``GET /graphql?query=...`` is detected from the query string alone."""
    mend, _ = await start(start_upstream, start_mend)
    resp = await mend.client.get("/graphql", params={"query": "{ report }"})
    document = json.loads(await resp.read())
    assert_graphql_response(document)
    assert document["errors"][0]["extensions"]["code"] == "GRAPHQL_FIELD_ERROR"


async def test_a_successful_query_is_byte_for_byte(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A query without errors reaches the agent as the server sent it."""
    mend, url = await start(start_upstream, start_mend)
    body = {"query": "{ order(id: 3) { id total } }"}
    direct = await (await mend.client.session.post(url, json=body)).read()
    resp = await mend.client.post("/graphql", json=body)
    assert await resp.read() == direct
    assert "X-Error-Code" not in resp.headers


async def test_a_dead_upstream_is_a_graphql_error(start_mend: StartMend) -> None:
    """mend's own UPSTREAM_UNREACHABLE, for a GraphQL request, is a GraphQL response."""
    mend = await start_mend(f"http://127.0.0.1:{free_port()}")
    resp = await mend.client.post("/graphql", json={"query": "{ report }"})
    document = json.loads(await resp.read())
    assert_graphql_response(document)
    assert "data" not in document
    assert document["errors"][0]["extensions"]["code"] == "UPSTREAM_UNREACHABLE"
    assert resp.headers["Content-Type"] == "application/json"
