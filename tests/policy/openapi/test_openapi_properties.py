"""Property tests: requests generated from the document's own schemas are never refused, and no
request, however odd, makes mend fail (hypothesis, hypothesis-jsonschema).

The checker is exercised directly with many examples; a batch of generated requests then goes
through a real mend in front of a real upstream.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema
from multidict import CIMultiDict, MultiDict

from proxy.policy.envelope.model import Category, Envelope, InvalidField
from proxy.policy.openapi.agent_request import Request
from proxy.policy.openapi.document import Document
from proxy.policy.openapi.enrich import enrich
from proxy.policy.openapi.spec import Mount, Spec
from tests.conftest import StartMend, StartUpstream

DATA = Path(__file__).parents[2] / "data" / "openapi"
ROOT = Mount("/", False, "")
SPECS = {name: Spec.load(DATA / name) for name in ("shop-3.0.yaml", "shop-3.1.json")}


def _inline(schema: Any, document: Document, depth: int = 0) -> Any:
    """``schema`` with every ``$ref`` replaced by what it names (for hypothesis-jsonschema)."""
    schema = document.deref(schema)
    if isinstance(schema, dict):
        return {k: _inline(v, document, depth + 1) for k, v in schema.items() if k != "nullable"}
    if isinstance(schema, list):
        return [_inline(v, document, depth + 1) for v in schema]
    return schema


def _valid(schema: Any) -> st.SearchStrategy[Any]:
    """Values valid for ``schema``: hypothesis-jsonschema for scalars; objects and arrays put
    together here (its object strategy uses a hypothesis internal that hypothesis 6.1xx no
    longer has: ``'many' object has no attribute 'more'``)."""
    if schema.get("type") == "object":
        properties = schema.get("properties", {})
        required = set(schema.get("required", ()))
        return st.fixed_dictionaries(
            {k: _valid(v) for k, v in properties.items() if k in required},
            optional={k: _valid(v) for k, v in properties.items() if k not in required},
        )
    if schema.get("type") == "array":
        return st.lists(
            _valid(schema["items"]),
            min_size=schema.get("minItems", 0),
            max_size=schema.get("maxItems", 5),
        )
    return from_schema(schema)


def _body_schema(spec: Spec) -> st.SearchStrategy[Any]:
    operation = spec.operations.by_id["createOrder"]
    assert operation.body is not None
    return _valid(_inline(operation.body.schema, spec.document))


def _check(spec: Spec, method: str, path: str, query: MultiDict[str], body: bytes) -> list[Any]:
    located = spec.locate(method, path, ROOT)
    assert located is not None
    assert located.match is not None
    return spec.checker.check(
        located.match, query, CIMultiDict({"X-Reason": "fraud"}), "application/json", body
    )


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_generated_valid_bodies_are_never_refused(name: str) -> None:
    """Every body hypothesis-jsonschema generates from the request schema passes the checker."""
    spec = SPECS[name]

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(_body_schema(spec))
    def check(body: Any) -> None:
        found = _check(spec, "POST", "/api/v1/orders", MultiDict(), json.dumps(body).encode())
        assert found == [], found

    check()


@pytest.mark.parametrize("name", sorted(SPECS))
def test_generated_valid_parameters_are_never_refused(name: str) -> None:
    """Query and path parameters drawn from their schemas pass the checker, as sent in a URL."""
    spec = SPECS[name]

    @settings(max_examples=60, deadline=None)
    @given(
        st.integers(1, 100),
        st.sampled_from(["open", "paid", "shipped"]),
        st.lists(st.text(max_size=8), max_size=3),
        st.integers(1, 1_000_000),
    )
    def check(limit: int, status: str, tags: list[str], order_id: int) -> None:
        query = MultiDict([("limit", str(limit)), ("status", status)])
        for tag in tags:
            query.add("tag", tag)
        assert _check(spec, "GET", "/api/v1/orders", query, b"") == []
        assert _check(spec, "DELETE", f"/api/v1/orders/{order_id}", MultiDict(), b"") == []

    check()


@pytest.mark.parametrize("name", sorted(SPECS))
def test_any_body_or_query_is_answered_never_raised(name: str) -> None:
    """Arbitrary JSON bodies, bytes and query values give violations or none, never an error;
    every violation's pointer is a JSON pointer."""
    spec = SPECS[name]

    @settings(max_examples=120, deadline=None)
    @given(JSON, st.binary(max_size=64), st.text(max_size=30), st.text(max_size=30))
    def check(document: Any, raw: bytes, limit: str, tag: str) -> None:
        query = MultiDict([("limit", limit), ("tag", tag), ("status", tag)])
        for body in (json.dumps(document).encode(), raw):
            for violation in _check(spec, "POST", "/api/v1/orders", query, body):
                assert violation.pointer == "" or violation.pointer.startswith("/")
        _check(spec, "GET", "/api/v1/orders", query, b"")

    check()


@pytest.mark.parametrize("name", sorted(SPECS))
def test_any_path_and_field_enriches_without_failing(name: str) -> None:
    """Any method, path and invalid-field pointer: the envelope comes back, valid, with its
    code unchanged."""
    spec = SPECS[name]
    envelope = Envelope(
        code="NOT_FOUND",
        message="m",
        category=Category.NOT_FOUND,
        severity="error",
        retryable=False,
        action="fix_request",
        hint="h",
        request_id="req_1",
        upstream_status=404,
        rule="r",
        invalid_fields=(),
    )

    @settings(max_examples=120, deadline=None)
    @given(
        st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "TRACE"]),
        st.lists(st.text(max_size=12), max_size=6),
        st.text(max_size=20),
    )
    def check(method: str, segments: list[str], pointer: str) -> None:
        path = "/api/v1/" + "/".join(quote(s, safe="") for s in segments)
        fields = envelope.model_copy(
            update={"invalid_fields": (InvalidField(field=pointer, reason="bad"),)}
        )
        request = Request(method, path, MultiDict(), CIMultiDict())
        out = enrich(fields, spec, ROOT, request)
        assert out.code == "NOT_FOUND"
        Envelope.model_validate(out.model_dump())

    check()


async def test_generated_requests_through_mend(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """Generated valid bodies reach the upstream byte for byte; generated junk is answered with
    VALIDATION_FAILED, never with mend's own internal error, and never reaches it."""
    spec = SPECS["shop-3.1.json"]
    valid: list[bytes] = []
    junk: list[bytes] = []

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(_body_schema(spec), JSON)
    def collect(body: Any, other: Any) -> None:
        valid.append(json.dumps(body, separators=(" ,", ": ")).encode())
        junk.append(json.dumps({"items": other}).encode())

    collect()
    received: list[bytes] = []

    async def orders(request: web.Request) -> web.Response:
        received.append(await request.read())
        return web.json_response({"id": 1}, status=201)

    server = await start_upstream({"/api/v1/orders": orders})
    url = str(server.make_url("/api/v1")).rstrip("/")
    mend = await start_mend(
        url, route={"openapi": DATA / "shop-3.1.json", "validate_requests": True}
    )
    headers = {"Content-Type": "application/json"}
    for body in valid:
        response = await mend.client.post("/orders", data=body, headers=headers)
        assert response.status == 201, await response.text()
    assert received == valid
    for body in junk:
        response = await mend.client.post("/orders", data=body, headers=headers)
        assert response.status == 400
        assert (await response.json())["error"]["code"] == "VALIDATION_FAILED"
    assert len(received) == len(valid)
