"""MCP's wire details through mend, on a hand-made upstream that answers exactly as each case needs.

The answers are those of MCP servers of every revision in use (2025-03-26 to 2026-07-28): tool
results carrying members mend must keep, transport answers that must keep their HTTP status,
notifications, and REST traffic that only carries an MCP header. What the official SDK makes of
them is in tests/test_mcp.py; here each wire detail is checked on its own.
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
