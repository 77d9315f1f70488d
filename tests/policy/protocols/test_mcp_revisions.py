"""MCP's wire details through mend, on a hand-made upstream that answers exactly as each case needs.

The answers are those of MCP servers of every revision in use (2025-03-26 to 2026-07-28): tool
results carrying members mend must keep, transport answers that must keep their HTTP status,
notifications, and REST traffic that only carries an MCP header. What the official SDK makes of
them is in tests/policy/protocols/test_mcp.py; here each wire detail is checked on its own.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from tests.conftest import Mend, StartMend, StartUpstream

SECRET = "postgres://admin:Pl4ntedSecret@db.internal:5432/issues"
HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}


def tool_call(id_: Any, name: str = "create_issue", **arguments: Any) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": params}


async def answering(
    start_upstream: StartUpstream,
    start_mend: StartMend,
    status: int,
    answer: Any,
    content_type: str = "application/json",
) -> Mend:
    """mend in front of an upstream whose /mcp answers every POST with ``answer``."""

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        body = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
        return web.Response(status=status, body=body, content_type=content_type)

    upstream = await start_upstream({"/mcp": handler, "/api/items": handler})
    return await start_mend(upstream)


async def test_structured_content_of_a_tool_error_is_kept_redacted(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """An isError result's structuredContent stays (for programs), its strings redacted like
    the envelope: the planted connection string never reaches the agent."""
    result = {
        "content": [{"type": "text", "text": f"Error executing tool sync: failed on {SECRET}"}],
        "structuredContent": {"error": f"failed on {SECRET}", "attempts": 3},
        "isError": True,
        "resultType": "complete",
    }
    mend = await answering(
        start_upstream, start_mend, 200, {"jsonrpc": "2.0", "id": 4, "result": result}
    )
    resp = await mend.client.post("/mcp", json=tool_call(4, "sync"), headers=HEADERS)
    raw = await resp.read()
    answer = json.loads(raw)["result"]
    assert answer["structuredContent"]["attempts"] == 3
    assert "failed on" in answer["structuredContent"]["error"]
    assert b"Pl4ntedSecret" not in raw
    assert answer["resultType"] == "complete"


DISCOVER = {"jsonrpc": "2.0", "id": 7, "method": "server/discover", "params": {}}
#: what a 1.x SDK server answers a request it has no session for (server/discover, 2026-07-28)
NO_SESSION = {
    "jsonrpc": "2.0",
    "id": "server-error",
    "error": {"code": -32600, "message": "Bad Request: Missing session ID"},
}


async def test_a_transport_4xx_keeps_its_status_and_answers_the_request_id(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A 1.x server's 400 to server/discover stays a 400, its JSON-RPC error carrying the id of
    the request (7), not the server's stand-in "server-error"."""
    mend = await answering(start_upstream, start_mend, 400, NO_SESSION)
    headers = {**HEADERS, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "server/discover"}
    resp = await mend.client.post("/mcp", json=DISCOVER, headers=headers)
    answer = await resp.json()
    assert resp.status == 400
    assert answer["id"] == 7
    assert answer["error"]["code"] == -32600
    assert answer["error"]["data"]["upstream_status"] == 400


async def test_a_5xx_jsonrpc_error_is_answered_200(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """An upstream 500 carrying a JSON-RPC error is answered 200 (1.x clients read no 5xx
    body), with X-Upstream-Status 500."""
    error = {"jsonrpc": "2.0", "id": 3, "error": {"code": -32603, "message": "boom"}}
    mend = await answering(start_upstream, start_mend, 500, error)
    resp = await mend.client.post("/mcp", json=tool_call(3), headers=HEADERS)
    assert (resp.status, resp.headers["X-Upstream-Status"]) == (200, "500")
    assert (await resp.json())["id"] == 3


async def test_a_failing_notification_gets_its_status_and_no_body(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A notification the server refuses with a 400 and a JSON-RPC error body is answered 400
    with an empty body: there is no request to answer."""
    mend = await answering(start_upstream, start_mend, 400, NO_SESSION)
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    resp = await mend.client.post("/mcp", json=note, headers=HEADERS)
    assert (resp.status, await resp.read()) == (400, b"")
    assert resp.headers["X-Error-Code"]


async def test_a_rest_request_with_an_mcp_session_header_stays_rest(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A REST POST that carries Mcp-Session-Id but no JSON-RPC body gets the REST envelope with
    the upstream's 404, not a JSON-RPC answer a REST client would read as success."""
    mend = await answering(start_upstream, start_mend, 404, {"detail": "item not found"})
    headers = {"Mcp-Session-Id": "abc123"}
    resp = await mend.client.post("/api/items", json={"name": "x"}, headers=headers)
    body = await resp.json()
    assert resp.status == 404
    assert "jsonrpc" not in body
    assert body["error"]["code"] == "RESOURCE_NOT_FOUND"


async def test_the_session_id_on_an_error_answer_is_kept_as_sent(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """The Mcp-Session-Id an upstream sets on an error answer reaches the client unmasked: it is
    the token the client sends back, not a leaked secret."""
    session_id = "28ff688400f24848a46d1cf12a294e3d"

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        headers = {"Mcp-Session-Id": session_id}
        return web.json_response(NO_SESSION, status=400, headers=headers)

    mend = await start_mend(await start_upstream({"/mcp": handler}))
    resp = await mend.client.post("/mcp", json=DISCOVER, headers=HEADERS)
    assert resp.status == 400
    assert resp.headers["Mcp-Session-Id"] == session_id


async def _tool_text(mend: Mend, arguments: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
    resp = await mend.client.post("/mcp", json=tool_call(5, "fetch", **arguments), headers=HEADERS)
    raw = await resp.read()
    return raw, json.loads(raw)["result"]["_meta"]["mend/error"]


def _failed_fetch(url: str) -> dict[str, Any]:
    text = f"Error executing tool fetch: Failed to fetch {url}: connection refused by 10.2.3.4"
    result = {"content": [{"type": "text", "text": text}], "isError": True}
    return {"jsonrpc": "2.0", "id": 5, "result": result}


async def test_a_url_the_model_sent_stays_readable(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """The internal URL the model asked fetch to read is quoted back as it sent it; the
    address the tool's text adds on its own is still redacted."""
    url = "http://127.0.0.1:8931/report"
    mend = await answering(start_upstream, start_mend, 200, _failed_fetch(url))
    raw, envelope = await _tool_text(mend, {"url": url})
    assert url in envelope["message"]
    assert b"10.2.3.4" not in raw


async def test_a_secret_the_model_sent_is_still_masked(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A URL carrying a password, sent by the model and quoted by the tool, is not kept: the
    secret never comes back."""
    url = "postgres://admin:Pl4ntedSecret@db.internal:5432/issues"
    mend = await answering(start_upstream, start_mend, 200, _failed_fetch(url))
    raw, _ = await _tool_text(mend, {"url": url})
    assert b"Pl4ntedSecret" not in raw


async def test_a_huge_structured_content_of_a_tool_error_is_dropped(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """An isError result whose structuredContent holds thousands of strings loses it (each
    would be redacted); the result still carries the plan and its other members."""
    result = {
        "content": [{"type": "text", "text": "Error executing tool sync: rate limit hit"}],
        "structuredContent": {"rows": [f"row {n}" for n in range(5000)]},
        "isError": True,
        "resultType": "complete",
    }
    mend = await answering(
        start_upstream, start_mend, 200, {"jsonrpc": "2.0", "id": 4, "result": result}
    )
    resp = await mend.client.post("/mcp", json=tool_call(4, "sync"), headers=HEADERS)
    answer = (await resp.json())["result"]
    assert "structuredContent" not in answer
    assert answer["resultType"] == "complete"
    assert answer["_meta"]["mend/error"]["code"] == "RATE_LIMITED"


async def test_version_negotiation_keeps_the_versions_the_server_supports(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A 2026-07-28 server's -32022 (unsupported version, HTTP 400) keeps its status, its code
    and the data members the client reads to pick a version, beside the envelope."""
    data = {"supported": ["2026-07-28"], "requested": "2099-01-01"}
    error = {"code": -32022, "message": "Unsupported protocol version", "data": data}
    mend = await answering(
        start_upstream, start_mend, 400, {"jsonrpc": "2.0", "id": 7, "error": error}
    )
    headers = {**HEADERS, "MCP-Protocol-Version": "2099-01-01", "Mcp-Method": "server/discover"}
    resp = await mend.client.post("/mcp", json=DISCOVER, headers=headers)
    answer = await resp.json()
    assert resp.status == 400
    assert (answer["id"], answer["error"]["code"]) == (7, -32022)
    assert answer["error"]["data"]["supported"] == ["2026-07-28"]
    assert answer["error"]["data"]["request_id"]


async def test_a_tool_call_longer_than_the_kept_copy_is_still_mcp(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A tools/call whose body is over 64 KiB (only its start is kept) with MCP's header: its
    isError result is still rewritten, the id carried over from the upstream's answer."""
    result = {"content": [{"type": "text", "text": "Error executing tool sync: timed out"}]}
    answer = {"jsonrpc": "2.0", "id": 9, "result": {**result, "isError": True}}
    mend = await answering(start_upstream, start_mend, 200, answer)
    call = tool_call(9, "sync", blob="x" * (100 << 10))
    resp = await mend.client.post("/mcp", json=call, headers=HEADERS)
    got = (await resp.json())["result"]
    assert got["_meta"]["mend/error"]["code"] == "TOOL_TIMEOUT"
    assert (await resp.json())["id"] == 9


async def test_a_rest_get_with_an_mcp_session_header_streams_through(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A REST GET carrying Mcp-Session-Id whose JSON answer streams (no Content-Length) is
    passed as it streams, not read whole as an MCP answer would be."""

    async def items(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"items": [], ')
        await response.write(b'"error": null}')
        await response.write_eof()
        return response

    mend = await start_mend(await start_upstream({"GET /api/items": items}))
    resp = await mend.client.get("/api/items", headers={"Mcp-Session-Id": "abc123"})
    assert await resp.json() == {"items": [], "error": None}
    assert "Content-Length" not in resp.headers
