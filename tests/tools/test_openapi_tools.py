"""Operator tools with OpenAPI documents: ``mend check --openapi``, ``mend explain``, the
catalog's codes per operation, and ``mend run`` refusing a bad document."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiohttp import web

from proxy.tools.cli import main
from tests.conftest import StartMend, StartUpstream

DATA = Path(__file__).parents[1] / "data" / "openapi"


def test_check_lists_the_operations_mend_recognises(capsys: pytest.CaptureFixture[str]) -> None:
    """Every operation, with the base path, its id and the parameters mend reads."""
    assert main(["check", "--openapi", str(DATA / "shop-3.1.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("OpenAPI 3.1, 6 operations, base path /api/v1")
    assert "  DELETE  /api/v1/orders/{orderId}  cancelOrder  (path:orderId, header:X-Reason)" in out


def test_check_reports_a_bad_document_by_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A document missing ``info.version`` fails with its file and line."""
    path = tmp_path / "bad.yaml"
    path.write_text("openapi: 3.1.0\ninfo: {title: x}\npaths: {}\n", encoding="utf-8")
    assert main(["check", "--openapi", str(path)]) == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"{path}:2: ")
    assert error.endswith("'version' is a required property") or error.endswith(
        '"version" is a required property'
    )


def test_run_refuses_to_start_on_a_bad_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``mend run --openapi`` with a broken document is one ``mend: error:`` line, exit 2."""
    path = tmp_path / "bad.yaml"
    path.write_text("openapi: 3.0.3\ninfo: {title: x, version: '1'}\npaths: 7\n", encoding="utf-8")
    code = main(["run", "--upstream", "http://127.0.0.1:9", "--openapi", str(path)])
    assert code == 2
    assert capsys.readouterr().err.startswith(f"mend: error: {path}:3: ")


def test_explain_shows_the_operation_and_schema_facts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``mend explain`` with a route's document: the enriched envelope and the facts used."""
    config = tmp_path / "mend.yaml"
    document = DATA / "shop-3.0.yaml"
    config.write_text(
        f"routes:\n  - name: shop\n    upstream: http://127.0.0.1:9/api/v1\n"
        f"    openapi: {document}\n",
        encoding="utf-8",
    )
    body = json.dumps({"errors": [{"field": "priority", "message": "is invalid"}]})
    argv = ["explain", "--config", str(config), "--status", "422", "--body", body]
    argv += ["--header", "Content-Type: application/json", "--method", "POST"]
    argv += ["--path", "/orders", "--request-body", '{"priority": "HIGH"}', "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["openapi"]["operation"]["id"] == "createOrder"
    assert report["openapi"]["fields"][0]["schema"]["enum"] == ["low", "medium", "high"]
    error = report["envelope"]["error"]
    assert error["invalid_fields"][0]["received"] == "HIGH"
    assert error["suggested_value"] == "high"


async def test_catalog_lists_the_codes_of_each_operation(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """``/_mend/errors`` lists each documented operation with the code each documented error
    response produces, and a code's page names the operations that produce it."""

    async def ok(_: web.Request) -> web.Response:
        return web.json_response({})

    server = await start_upstream({"/": ok})
    route = {"openapi": DATA / "shop-3.0.yaml", "validate_requests": True}
    mend = await start_mend(str(server.make_url("/")).rstrip("/"), route=route)
    index = await (await mend.client.get("/_mend/errors")).json()
    by_id = {o["operation"]["id"]: o["codes"] for o in index["operations"]}
    category = {e["code"]: e["category"] for e in index["errors"]}
    (not_found,) = by_id["getOrder"]["404"]
    assert category[not_found] == "not_found"
    assert category[by_id["createOrder"]["409"][0]] == "conflict"
    assert by_id["createOrder"]["before_upstream"] == ["VALIDATION_FAILED"]
    page = await (await mend.client.get(f"/_mend/errors/{not_found}")).json()
    assert {"id": "getOrder", "method": "GET", "path": "/orders/{orderId}"} in page["operations"]
