"""JSON-RPC 2.0 through mend (not MCP): a real aiohttp JSON-RPC upstream on loopback.

Every error the agent gets is a JSON-RPC response with its call's id; successes, notifications
and ordinary REST traffic are left as they were.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from proxy.config.choices import ProtocolName
from tests.conftest import StartMend, StartUpstream
from tests.runtime.test_app import free_port

SECRET = "sk_live_51Hplanted0000000000000000"
TRACE = 'Traceback (most recent call last):\n  File "/srv/rpc/handlers.py", line 88, in get_order'


def _error(id_: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": id_, "error": error}


def _answer(call: dict[str, Any]) -> dict[str, Any] | None:
    """The upstream's JSON-RPC server: a few methods, each failing its own way."""
    method, id_ = call.get("method"), call.get("id")
    if "id" not in call:
        return None  # a notification: no response
    if method == "add":
        return {"jsonrpc": "2.0", "id": id_, "result": sum(call["params"])}
    if method == "get_order":
        data = {"trace": TRACE, "api_key": SECRET}
        return _error(id_, -32602, f"invalid params: order id must be an integer ({SECRET})", data)
    if method == "crash":
        return _error(id_, -32000, "NullPointerException at com.acme.Rpc.crash(Rpc.java:7)")
    return _error(id_, -32601, "Method not found")


async def rpc(request: web.Request) -> web.Response:
    body = await request.json()
    if isinstance(body, list):
        answers = [a for call in body if (a := _answer(call)) is not None]
        return web.json_response(answers) if answers else web.Response(status=204)
    found = _answer(body)
    return web.json_response(found) if found is not None else web.Response(status=204)


async def rpc_500(request: web.Request) -> web.Response:
    body = await request.json()
    return web.json_response(_error(body["id"], -32603, f"db down {TRACE}"), status=500)


async def html_502(_: web.Request) -> web.Response:
    return web.Response(status=502, text="<html><title>502 Bad Gateway</title></html>")


async def start(start_upstream: StartUpstream, start_mend: StartMend, **route: Any) -> Any:
    upstream = await start_upstream(
        {"POST /rpc": rpc, "POST /rpc500": rpc_500, "POST /bad": html_502}
    )
    return await start_mend(upstream, route=route or None)


async def post(mend: Any, path: str, body: Any) -> tuple[int, dict[str, str], bytes]:
    resp = await mend.client.post(path, json=body)
    return resp.status, dict(resp.headers), await resp.read()


async def test_an_error_with_data_keeps_id_and_code_and_loses_internals(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """An upstream JSON-RPC error (with a trace and a key in data) comes back as JSON-RPC: same
    id, the upstream's code, message = envelope message and hint, data = the envelope."""
    mend = await start(start_upstream, start_mend)
    status, headers, raw = await post(
        mend, "/rpc", {"jsonrpc": "2.0", "id": 41, "method": "get_order", "params": ["x"]}
    )
    answer = json.loads(raw)
    assert status == 200
    assert answer["jsonrpc"] == "2.0"
    assert answer["id"] == 41
    error = answer["error"]
    assert error["code"] == -32602
    assert error["data"]["code"] == "VALIDATION_FAILED"
    assert error["message"].startswith(error["data"]["message"])
    assert error["message"].endswith(f". {error['data']['hint']}")
    assert headers["X-Error-Code"] == "VALIDATION_FAILED"
    for leaked in (SECRET, "handlers.py", "Traceback"):
        assert leaked not in raw.decode()


async def test_a_batch_is_answered_element_by_element_in_order(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A batch keeps its order; results pass as sent, each error becomes its own answer, and
    notifications in it get nothing."""
    mend = await start(start_upstream, start_mend)
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "add", "params": [1, 2]},
        {"jsonrpc": "2.0", "method": "add", "params": [5]},
        {"jsonrpc": "2.0", "id": "b", "method": "nope"},
        {"jsonrpc": "2.0", "id": 3, "method": "crash"},
    ]
    status, _, raw = await post(mend, "/rpc", batch)
    answers = json.loads(raw)
    assert status == 200
    assert [a["id"] for a in answers] == [1, "b", 3]
    assert answers[0] == {"jsonrpc": "2.0", "id": 1, "result": 3}
    assert answers[1]["error"]["code"] == -32601
    assert answers[1]["error"]["data"]["code"] == "OPERATION_NOT_FOUND"
    assert answers[2]["error"]["code"] == -32000
    assert "NullPointerException" not in raw.decode()


async def test_a_notification_gets_nothing_to_parse(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A notification is forwarded and answered as the upstream answered it: no body."""
    mend = await start(start_upstream, start_mend)
    status, _, raw = await post(mend, "/rpc", {"jsonrpc": "2.0", "method": "add", "params": [1]})
    assert (status, raw) == (204, b"")


async def test_a_notification_that_fails_gets_an_empty_answer(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """An HTTP error to a notification is answered 204 with no body, and still counted."""
    mend = await start(start_upstream, start_mend)
    status, headers, raw = await post(mend, "/bad", {"jsonrpc": "2.0", "method": "log"})
    assert (status, raw) == (204, b"")
    assert headers["X-Error-Code"]


async def test_http_500_with_a_jsonrpc_error_is_a_200_jsonrpc_error(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A 500 carrying a JSON-RPC error becomes the JSON-RPC error in a 200 (clients read only
    2xx bodies); the upstream's status is in X-Upstream-Status."""
    mend = await start(start_upstream, start_mend)
    status, headers, raw = await post(
        mend, "/rpc500", {"jsonrpc": "2.0", "id": 9, "method": "get_order"}
    )
    answer = json.loads(raw)
    assert status == 200
    assert headers["X-Upstream-Status"] == "500"
    assert answer["id"] == 9
    assert answer["error"]["code"] == -32603
    assert answer["error"]["data"]["upstream_status"] == 500
    assert "handlers.py" not in raw.decode()


async def test_an_html_error_page_becomes_a_jsonrpc_error_with_the_calls_id(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """An error that is not JSON-RPC (an nginx 502 page) is answered with the call's id."""
    mend = await start(start_upstream, start_mend)
    status, _, raw = await post(mend, "/bad", {"jsonrpc": "2.0", "id": "q-1", "method": "x"})
    answer = json.loads(raw)
    assert status == 200
    assert answer["id"] == "q-1"
    assert answer["error"]["code"] == -32603
    assert answer["error"]["data"]["retryable"] is True


async def test_a_dead_upstream_is_a_jsonrpc_error_for_each_call_of_a_batch(
    start_mend: StartMend,
) -> None:
    """mend's own UPSTREAM_UNREACHABLE answers every call of a batch that has an id."""
    mend = await start_mend(f"http://127.0.0.1:{free_port()}")
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "a"},
        {"jsonrpc": "2.0", "method": "b"},
        {"jsonrpc": "2.0", "id": 2, "method": "c"},
    ]
    status, headers, raw = await post(mend, "/rpc", batch)
    answers = json.loads(raw)
    assert status == 200
    assert headers["X-Error-Code"] == "UPSTREAM_UNREACHABLE"
    assert [a["id"] for a in answers] == [1, 2]
    assert {a["error"]["data"]["code"] for a in answers} == {"UPSTREAM_UNREACHABLE"}
    assert answers[0]["error"]["code"] == -32603


async def test_a_success_passes_byte_for_byte(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A JSON-RPC result reaches the agent as the upstream sent it."""
    mend = await start(start_upstream, start_mend)
    call = {"jsonrpc": "2.0", "id": 5, "method": "add", "params": [2, 3]}
    _, headers, raw = await post(mend, "/rpc", call)
    assert raw == json.dumps({"jsonrpc": "2.0", "id": 5, "result": 5}).encode()
    assert "X-Error-Code" not in headers


async def test_an_http_route_keeps_the_rest_envelope(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """``protocol: http`` turns detection off: the error is the REST envelope."""
    mend = await start(start_upstream, start_mend, protocol=ProtocolName.HTTP)
    status, _, raw = await post(mend, "/rpc500", {"jsonrpc": "2.0", "id": 9, "method": "x"})
    assert status == 500
    assert json.loads(raw)["error"]["code"] == "INTERNAL_ERROR"
    assert "jsonrpc" not in json.loads(raw)


async def test_errors_are_counted_with_their_protocol(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """mend_errors_total carries protocol="jsonrpc" for a JSON-RPC error."""
    mend = await start(start_upstream, start_mend)
    await post(mend, "/rpc", {"jsonrpc": "2.0", "id": 1, "method": "nope"})
    labels = {
        "code": "OPERATION_NOT_FOUND",
        "category": "not_found",
        "route": "default",
        "upstream_status": "200",
        "rule": "jsonrpc.method_not_found",
        "protocol": "jsonrpc",
    }
    assert mend.metric("mend_errors_total", **labels) == 1
    line = next(x for x in mend.log_lines() if x.get("code") == "OPERATION_NOT_FOUND")
    assert line["protocol"] == "jsonrpc"


async def test_a_rest_json_post_is_not_read_as_a_protocol(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """An ordinary JSON POST whose 200 says "error" passes through untouched."""

    async def order(_: web.Request) -> web.Response:
        return web.json_response({"error": {"code": -1}, "id": 3})

    mend = await start_mend(await start_upstream({"POST /orders": order}))
    resp = await mend.client.post("/orders", json={"qty": 1})
    assert await resp.json() == {"error": {"code": -1}, "id": 3}
    assert "X-Error-Code" not in resp.headers


async def test_a_huge_batch_is_matched_at_most_a_hundred_times(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """300 errors in one batch: each answered with its own id, in order; the first 100 matched
    and counted, the rest sharing the last envelope (a batch cannot buy 300 rule walks)."""
    mend = await start(start_upstream, start_mend)
    batch = [{"jsonrpc": "2.0", "id": n, "method": "nope"} for n in range(300)]
    _, _, raw = await post(mend, "/rpc", batch)
    answers = json.loads(raw)
    assert [a["id"] for a in answers] == list(range(300))
    assert {a["error"]["data"]["code"] for a in answers} == {"OPERATION_NOT_FOUND"}
    labels = {
        "code": "OPERATION_NOT_FOUND",
        "category": "not_found",
        "route": "default",
        "upstream_status": "200",
        "rule": "jsonrpc.method_not_found",
        "protocol": "jsonrpc",
    }
    assert mend.metric("mend_errors_total", **labels) == 100
