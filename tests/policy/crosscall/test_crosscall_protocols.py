"""The cross-call view (docs/contract.md §7) over protocol answers other than one JSON error: an MCP
answer sent as server-sent events, a JSON-RPC batch, a GraphQL answer with several errors.

The upstreams are aiohttp apps on loopback answering exactly what each case needs; mend keeps
its state in memory. Each error of a response is counted on its own, known by what it answers.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from tests.conftest import Mend, StartMend, StartUpstream

MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-11-25",
    "Mcp-Session-Id": "session-sse",
}


def _tool_error(id_: Any) -> dict[str, Any]:
    text = "Error executing tool create_issue: No changes staged for commit."
    result = {"content": [{"type": "text", "text": text}], "isError": True}
    return {"jsonrpc": "2.0", "id": id_, "result": result}


async def _sse(request: web.Request) -> web.StreamResponse:
    """An MCP server answering every call as an event stream: a progress notification, then
    a tool result that is an error."""
    call = await request.json()
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}
    await response.write(f"event: message\ndata: {json.dumps(progress)}\n\n".encode())
    await response.write(
        f"event: message\ndata: {json.dumps(_tool_error(call['id']))}\n\n".encode()
    )
    await response.write_eof()
    return response


def _events(raw: bytes) -> list[dict[str, Any]]:
    return [
        json.loads(line[len("data: ") :])
        for line in raw.decode().splitlines()
        if line.startswith("data: ")
    ]


async def test_a_failing_call_answered_as_sse_repeats_and_escalates(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """The same failing tools/call sent three times (new ids), answered as SSE: the second
    result carries repeat, the third escalates, as a JSON answer would."""
    mend = await start_mend(await start_upstream({"POST /mcp": _sse}))
    envelopes = []
    for call_id in (1, 2, 3):
        call = {
            "jsonrpc": "2.0",
            "id": call_id,
            "method": "tools/call",
            "params": {"name": "create_issue", "arguments": {"title": "t"}},
        }
        resp = await mend.client.post("/mcp", json=call, headers=MCP_HEADERS)
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        progress, answer = _events(await resp.read())
        assert progress["method"] == "notifications/progress"
        envelopes.append(answer["result"]["_meta"]["mend/error"])
    assert [e.get("repeat", {}).get("count") for e in envelopes] == [None, 2, 3]
    assert envelopes[2]["action"] == "escalate"


async def _rpc_batch(request: web.Request) -> web.Response:
    answers = [
        {"jsonrpc": "2.0", "id": c["id"], "error": {"code": -32601, "message": "Method not found"}}
        for c in await request.json()
    ]
    return web.json_response(answers)


async def _batch(mend: Mend, ids: tuple[int, int]) -> list[dict[str, Any]]:
    batch = [
        {"jsonrpc": "2.0", "id": ids[0], "method": "orders.get", "params": [1]},
        {"jsonrpc": "2.0", "id": ids[1], "method": "orders.list", "params": []},
    ]
    resp = await mend.client.post("/rpc", json=batch, headers={"X-Agent-Session": "batch"})
    return [answer["error"]["data"] for answer in await resp.json()]


async def test_each_error_of_a_batch_is_counted_on_its_own(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A batch of two failing calls: the first time neither is a repeat (the two are not
    repeats of each other); sent again, each carries repeat count 2."""
    mend = await start_mend(await start_upstream({"POST /rpc": _rpc_batch}))
    first = await _batch(mend, (1, 2))
    second = await _batch(mend, (3, 4))
    assert [e.get("repeat") for e in first] == [None, None]
    assert [e["repeat"]["count"] for e in second] == [2, 2]


async def _graphql(_: web.Request) -> web.Response:
    errors = [
        {"message": "Order 7 not found", "path": ["order"], "extensions": {"code": "NOT_FOUND"}},
        {
            "message": "Customer 9 not found",
            "path": ["customer"],
            "extensions": {"code": "NOT_FOUND"},
        },
    ]
    return web.json_response({"data": {"order": None, "customer": None}, "errors": errors})


async def test_each_error_of_a_graphql_answer_is_counted_on_its_own(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A GraphQL answer with two errors, asked twice: each entry carries repeat count 2 the
    second time, and neither the first time."""
    mend = await start_mend(await start_upstream({"POST /graphql": _graphql}))
    query = {"query": "{ order(id: 7) { id } customer(id: 9) { id } }"}
    seen = []
    for _ in range(2):
        resp = await mend.client.post("/graphql", json=query, headers={"X-Agent-Session": "g"})
        seen.append([e["extensions"]["mend"] for e in (await resp.json())["errors"]])
    assert [e.get("repeat") for e in seen[0]] == [None, None]
    assert [e["repeat"]["count"] for e in seen[1]] == [2, 2]
