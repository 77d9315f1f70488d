"""OpenAPI through a real mend in front of a real aiohttp upstream (docs/contract.md §8).

The upstream is a legacy API whose errors name a field but never the allowed values; the
route's OpenAPI document (tests/data/openapi/, 3.0 YAML and 3.1 JSON) supplies them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.conftest import Mend, StartMend, StartUpstream

DATA = Path(__file__).parents[2] / "data" / "openapi"
SPECS = [DATA / "shop-3.0.yaml", DATA / "shop-3.1.json"]
VALID_ORDER = {
    "customer": {"email": "a@example.com"},
    "priority": "high",
    "items": [{"sku": "ABC-1234", "qty": 2}],
}


class Legacy:
    """The legacy shop: 422 naming the field only, 409 with the open order, hits counted, and
    the exact bytes of every request body it received."""

    def __init__(self) -> None:
        self.hits = 0
        self.bodies: list[bytes] = []
        self.headers: list[dict[str, str]] = []

    async def orders(self, request: web.Request) -> web.Response:
        self.hits += 1
        body = await request.read()
        self.bodies.append(body)
        self.headers.append(dict(request.headers))
        if request.method == "GET":
            return web.json_response([])
        document = json.loads(body or b"{}")
        if document.get("priority") not in ("low", "medium", "high"):
            errors = [{"field": "priority", "message": "is invalid"}]
            return web.json_response({"errors": errors}, status=422)
        if document.get("customer", {}).get("name") == "busy":
            return web.json_response({"message": "an order is open", "open_order": 7}, status=409)
        return web.json_response({"id": 1}, status=201)

    async def order(self, request: web.Request) -> web.Response:
        self.hits += 1
        if request.method not in ("GET", "DELETE"):
            return web.Response(status=405, headers={"Allow": "GET, DELETE"})
        return web.json_response({"id": int(request.match_info["id"])})

    async def missing(self, request: web.Request) -> web.Response:
        self.hits += 1
        return web.json_response({"message": "Not Found"}, status=404)

    def routes(self) -> dict[str, Any]:
        return {
            "/api/v1/orders": self.orders,
            "/api/v1/orders/{id}": self.order,
            "/api/v1/{tail:.*}": self.missing,
        }


async def _shop(
    start_upstream: StartUpstream,
    start_mend: StartMend,
    spec: Path,
    *,
    validate: bool = False,
) -> tuple[Legacy, Mend]:
    legacy = Legacy()
    server: TestServer = await start_upstream(legacy.routes())
    url = str(server.make_url("/api/v1")).rstrip("/")
    route = {"openapi": spec, "validate_requests": validate}
    return legacy, await start_mend(url, route=route)


@pytest.mark.parametrize("spec", SPECS, ids=["3.0", "3.1"])
async def test_invalid_enum_gets_the_allowed_values_and_the_nearest(
    start_upstream: StartUpstream, start_mend: StartMend, spec: Path
) -> None:
    """The upstream only says "priority is invalid"; the envelope gains the enum, the value
    nearest what was sent, the operation and an example request."""
    legacy, mend = await _shop(start_upstream, start_mend, spec)
    order = {**VALID_ORDER, "priority": "HIGH"}
    response = await mend.client.post("/orders", json=order)
    error = (await response.json())["error"]
    assert response.status == 422
    assert legacy.hits == 1
    assert error["operation"] == {"id": "createOrder", "method": "POST", "path": "/orders"}
    field = error["invalid_fields"][0]
    assert field["field"] == "/priority"
    assert field["location"] == "body"
    assert field["allowed_values"]["enum"] == ["low", "medium", "high"]
    assert field["suggested_value"] == "high"
    assert field["documented"] is True
    assert error["allowed_values"]["enum"] == ["low", "medium", "high"]
    assert error["suggested_value"] == "high"
    assert "send one of low, medium, high, suggested: 'high'" in error["steps"][0]


@pytest.mark.parametrize("spec", SPECS, ids=["3.0", "3.1"])
async def test_example_request_is_a_minimal_valid_request(
    start_upstream: StartUpstream, start_mend: StartMend, spec: Path
) -> None:
    """``example_request`` is built from the document's examples and defaults, and mend's own
    validation accepts it."""
    legacy, mend = await _shop(start_upstream, start_mend, spec, validate=True)
    response = await mend.client.post("/orders", json={"priority": "urgent"})
    example = (await response.json())["error"]["example_request"]
    assert example["method"] == "POST"
    assert example["path"] == "/orders"
    assert example["body"]["priority"] == "medium"  # the schema's default
    assert example["body"]["items"] == [{"sku": "ABC-1234", "qty": 1}]
    assert legacy.hits == 0
    again = await mend.client.post(example["path"], json=example["body"])
    assert again.status == 201
    assert legacy.hits == 1


async def test_unknown_pointer_is_kept_and_flagged(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A field the document does not know stays in the envelope, marked ``documented: false``."""

    async def odd(_: web.Request) -> web.Response:
        errors = [{"field": "colour", "message": "is invalid"}]
        return web.json_response({"errors": errors}, status=422)

    server = await start_upstream({"/api/v1/orders": odd})
    url = str(server.make_url("/api/v1")).rstrip("/")
    mend = await start_mend(url, route={"openapi": SPECS[0]})
    error = (await (await mend.client.post("/orders", json=VALID_ORDER)).json())["error"]
    assert error["invalid_fields"][0]["field"] == "/colour"
    assert error["invalid_fields"][0]["documented"] is False
    assert error["invalid_fields"][0]["allowed_values"] is None


async def _answering(
    start_upstream: StartUpstream, start_mend: StartMend, status: int, body: dict[str, Any]
) -> dict[str, Any]:
    """The envelope mend makes of ``POST /orders`` answered ``status`` ``body`` (shop 3.0)."""

    async def answer(_: web.Request) -> web.Response:
        return web.json_response(body, status=status)

    server = await start_upstream({"/api/v1/orders": answer})
    url = str(server.make_url("/api/v1")).rstrip("/")
    mend = await start_mend(url, route={"openapi": SPECS[0]})
    error: dict[str, Any] = (await (await mend.client.post("/orders", json=VALID_ORDER)).json())[
        "error"
    ]
    return error


async def test_a_field_named_only_in_prose_gets_its_pointer(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """An upstream that names the field only in its message: the documented field's pointer and
    its allowed values."""
    error = await _answering(
        start_upstream, start_mend, 400, {"message": "Invalid value: 'priority' is not allowed"}
    )
    assert error["field"] == "/priority"
    field = error["invalid_fields"][0]
    assert (field["field"], field["documented"]) == ("/priority", True)
    assert field["allowed_values"]["enum"] == ["low", "medium", "high"]


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("text/plain", "priority must be one of the allowed values"),
        ("application/xml", "<error><message>'priority' is not valid</message></error>"),
    ],
    ids=["text", "xml"],
)
async def test_a_field_named_in_any_format_gets_its_pointer(
    start_upstream: StartUpstream, start_mend: StartMend, content_type: str, body: str
) -> None:
    """Whatever the upstream's format, a documented field its message names gets its pointer
    and the document's allowed values."""

    async def answer(_: web.Request) -> web.Response:
        return web.Response(status=400, text=body, content_type=content_type)

    server = await start_upstream({"/api/v1/orders": answer})
    url = str(server.make_url("/api/v1")).rstrip("/")
    mend = await start_mend(url, route={"openapi": SPECS[0]})
    error = (await (await mend.client.post("/orders", json=VALID_ORDER)).json())["error"]
    field = error["invalid_fields"][0]
    assert (field["field"], field["location"]) == ("/priority", "body")
    assert field["allowed_values"]["enum"] == ["low", "medium", "high"]


async def test_prose_naming_no_documented_field_adds_none(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A message whose words are no documented field gives no invalid field."""
    error = await _answering(
        start_upstream, start_mend, 400, {"message": "'colour' must be chosen, the request is bad"}
    )
    assert error["invalid_fields"] == []


async def test_a_pointer_with_a_framework_prefix_is_the_documented_field(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """Quarkus' ``create.arg0.priority`` is the document's ``/priority``."""
    violations = [{"field": "create.arg0.priority", "message": "must not be null"}]
    body = {"title": "Constraint Violation", "status": 400, "violations": violations}
    error = await _answering(start_upstream, start_mend, 400, body)
    field = error["invalid_fields"][0]
    assert (field["field"], field["documented"]) == ("/priority", True)
    assert error["field"] == "/priority"


async def test_route_without_document_has_no_openapi_fields(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """Without ``openapi:`` the envelope is as before: ``operation`` and ``example_request``
    null, fields not flagged."""
    legacy = Legacy()
    server = await start_upstream(legacy.routes())
    mend = await start_mend(str(server.make_url("/api/v1")).rstrip("/"))
    order = {**VALID_ORDER, "priority": "HIGH"}
    error = (await (await mend.client.post("/orders", json=order)).json())["error"]
    assert error["operation"] is None
    assert error["example_request"] is None
    assert error["invalid_fields"][0]["documented"] is None


@pytest.mark.parametrize("spec", SPECS, ids=["3.0", "3.1"])
async def test_undocumented_path_suggests_the_nearest_operation(
    start_upstream: StartUpstream, start_mend: StartMend, spec: Path
) -> None:
    """A 404 on a path the document lacks names the closest documented operation, templated,
    with the arguments read from the path sent."""
    _, mend = await _shop(start_upstream, start_mend, spec)
    error = (await (await mend.client.get("/order/42")).json())["error"]
    assert error["next_operation"] == "GET /orders/{orderId}"
    assert error["next_operation_args"] == {"orderId": "42"}
    assert error["action"] == "call_other_operation"
    assert "GET /orders/{orderId}" in error["allowed_values"]["operations"]
    assert error["example_request"]["path"] == "/orders/42"


async def test_undocumented_method_lists_the_allowed_methods(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A 405 on a documented path: the methods it has, and the nearest one as next_operation."""
    _, mend = await _shop(start_upstream, start_mend, SPECS[0])
    response = await mend.client.put("/orders/5", json={})
    error = (await response.json())["error"]
    assert response.status == 405
    assert error["allowed_values"]["methods"] == ["DELETE", "GET"]
    assert error["next_operation"] in ("GET /orders/{orderId}", "DELETE /orders/{orderId}")
    assert error["next_operation_args"] == {"orderId": "5"}


async def test_documented_404_is_not_redirected(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A 404 from a documented operation (no such order) names that operation and suggests no
    other one."""

    async def gone(_: web.Request) -> web.Response:
        return web.json_response({"message": "no such order"}, status=404)

    server = await start_upstream({"/api/v1/orders/{id}": gone})
    mend = await start_mend(
        str(server.make_url("/api/v1")).rstrip("/"), route={"openapi": SPECS[0]}
    )
    error = (await (await mend.client.get("/orders/9")).json())["error"]
    assert error["operation"]["id"] == "getOrder"
    assert error["next_operation"] is None


@pytest.mark.parametrize("spec", SPECS, ids=["3.0", "3.1"])
async def test_response_link_becomes_next_operation(
    start_upstream: StartUpstream, start_mend: StartMend, spec: Path
) -> None:
    """The 409's documented link names the operation to call first and its arguments, read
    from the upstream's error body."""
    _, mend = await _shop(start_upstream, start_mend, spec)
    order = {**VALID_ORDER, "customer": {"email": "a@example.com", "name": "busy"}}
    error = (await (await mend.client.post("/orders", json=order)).json())["error"]
    assert error["next_operation"] == "POST /orders/{orderId}/finalize"
    assert error["next_operation_args"] == {"orderId": 7}
    assert error["action"] == "call_other_operation"


@pytest.mark.parametrize("spec", SPECS, ids=["3.0", "3.1"])
async def test_validation_rejects_with_every_violation_before_the_upstream(
    start_upstream: StartUpstream, start_mend: StartMend, spec: Path
) -> None:
    """Every violation (nested objects, arrays, enums, bounds, formats, patterns, missing and
    unknown properties) is listed; the upstream is never called; the request counts as
    rejected."""
    legacy, mend = await _shop(start_upstream, start_mend, spec, validate=True)
    order = {
        "customer": {"email": "not-an-email", "name": "x"},
        "priority": "urgent",
        "items": [{"sku": "abc", "qty": 0, "colour": "red"}, {"qty": 500}],
    }
    response = await mend.client.post("/orders", json=order)
    error = (await response.json())["error"]
    assert response.status == 400
    assert error["code"] == "VALIDATION_FAILED"
    by_field = {f["field"]: f for f in error["invalid_fields"]}
    assert set(by_field) == {
        "/customer/email",
        "/customer/name",
        "/priority",
        "/items/0/sku",
        "/items/0/qty",
        "/items/0/colour",
        "/items/1/sku",
        "/items/1/qty",
    }
    assert by_field["/items/0/qty"]["suggested_value"] == 1
    assert by_field["/items/1/qty"]["suggested_value"] == 99
    assert by_field["/items/1/qty"]["received"] == 500
    assert by_field["/items/0/sku"]["allowed_values"]["pattern"] == "^[A-Z]{3}-[0-9]{4}$"
    assert by_field["/customer/email"]["allowed_values"]["format"] == "email"
    assert by_field["/items/1/sku"]["reason"] == "is required"
    assert by_field["/items/0/colour"]["allowed_values"] == {"properties": ["qty", "sku"]}
    assert by_field["/priority"]["received"] == "urgent"
    assert legacy.hits == 0
    assert mend.metric("mend_requests_total", route="default", outcome="rejected") == 1


async def test_validation_checks_path_query_and_header_parameters(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """Path parameters, query parameters (scalars and arrays) and headers are checked too."""
    legacy, mend = await _shop(start_upstream, start_mend, SPECS[0], validate=True)
    response = await mend.client.get("/orders?limit=500&status=lost&tag=a&tag=waytoolongtag")
    error = (await response.json())["error"]
    fields = {f["field"]: f for f in error["invalid_fields"]}
    assert set(fields) == {"/limit", "/status", "/tag/1"}
    assert fields["/limit"]["location"] == "query"
    assert fields["/limit"]["suggested_value"] == 100
    assert fields["/status"]["suggested_value"] in ("open", "paid", "shipped")
    response = await mend.client.delete("/orders/0", headers={"X-Reason": "Fraud"})
    error = (await response.json())["error"]
    fields = {f["field"]: f for f in error["invalid_fields"]}
    assert fields["/orderId"]["location"] == "path"
    assert fields["/X-Reason"]["suggested_value"] == "fraud"
    missing = await mend.client.delete("/orders/3")
    assert (await missing.json())["error"]["invalid_fields"][0]["field"] == "/X-Reason"
    assert legacy.hits == 0


async def test_valid_request_reaches_the_upstream_byte_identical(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A valid body is forwarded as the agent's bytes (odd spacing, key order, escapes and all),
    not re-serialised; its Content-Length is what the agent sent."""
    legacy, mend = await _shop(start_upstream, start_mend, SPECS[0], validate=True)
    raw = (
        b'{ "items":[{"qty":2 ,"sku":"ABC-1234"}],\n "priority" : "low",'
        b'"customer":{"email":"a@example.com","name":"Zo\\u00e9"} }'
    )
    headers = {"Content-Type": "application/json"}
    response = await mend.client.post("/orders", data=raw, headers=headers)
    assert response.status == 201
    assert legacy.bodies == [raw]
    assert legacy.headers[0]["Content-Length"] == str(len(raw))


async def test_invalid_json_body_is_rejected(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A body that is not JSON gets one violation at the root, never a crash."""
    legacy, mend = await _shop(start_upstream, start_mend, SPECS[0], validate=True)
    headers = {"Content-Type": "application/json"}
    response = await mend.client.post("/orders", data=b"{nope", headers=headers)
    error = (await response.json())["error"]
    assert error["code"] == "VALIDATION_FAILED"
    assert error["invalid_fields"][0]["field"] == ""
    assert legacy.hits == 0


async def test_undocumented_operation_is_forwarded_when_validating(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """Validation checks documented operations only; anything else goes to the upstream."""
    legacy, mend = await _shop(start_upstream, start_mend, SPECS[0], validate=True)
    response = await mend.client.get("/reports")
    assert response.status == 404
    assert legacy.hits == 1
