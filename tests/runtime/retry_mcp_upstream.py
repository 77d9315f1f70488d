"""An MCP server whose tool calls reset the connection the first time, for the retry tests
(issue 41).

``python -m tests.runtime.retry_mcp_upstream PORT`` serves streamable HTTP at ``/mcp`` with JSON
answers, statelessly (no session id; revisions 2025-03-26 to 2025-11-25; batches answered
element by element). ``tools/list`` lists three tools: ``lookup`` (``readOnlyHint: true``),
``set_flag`` (``idempotentHint: true``) and ``launch`` (no annotations: MCP's defaults, not
idempotent). Each takes a ``tag``; the first ``POST`` holding a ``tools/call`` of a tag (alone or
in a batch) is read whole and then its connection is aborted with no answer; the calls after are
answered ``{"content": [{"type": "text", "text": "<tool> done for <tag>"}]}``.
``GET /_hits?tag=T``: ``{"hits": [...]}``, every ``tools/call`` of that tag (``tool``, ``batch``:
whether it came in a batch) in arrival order.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from tests.runtime.retry_upstream import serve

REVISIONS = ("2025-11-25", "2025-06-18", "2025-03-26")
TOOLS: list[dict[str, Any]] = [
    {"name": "lookup", "annotations": {"readOnlyHint": True}},
    {"name": "set_flag", "annotations": {"readOnlyHint": False, "idempotentHint": True}},
    {"name": "launch"},
]
for _tool in TOOLS:
    _tool["description"] = f"The {_tool['name']} tool."
    _tool["inputSchema"] = {
        "type": "object",
        "properties": {"tag": {"type": "string"}},
        "required": ["tag"],
    }

#: every tools/call seen, by tag
CALLS: dict[str, list[dict[str, Any]]] = {}


def _answer(message: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON-RPC response to one message; ``None`` for a notification."""
    if "id" not in message:
        return None
    method, params = message.get("method"), message.get("params") or {}
    if method == "initialize":
        asked = params.get("protocolVersion")
        result: dict[str, Any] = {
            "protocolVersion": asked if asked in REVISIONS else REVISIONS[0],
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "retry-mcp", "version": "1.0"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        tool, tag = params.get("name"), (params.get("arguments") or {}).get("tag")
        result = {"content": [{"type": "text", "text": f"{tool} done for {tag}"}]}
    elif method == "ping":
        result = {}
    else:
        error = {"code": -32601, "message": f"unknown method {method}"}
        return {"jsonrpc": "2.0", "id": message["id"], "error": error}
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


async def mcp(request: web.Request) -> web.StreamResponse:
    if request.method != "POST":
        return web.Response(status=405, headers={"Allow": "POST"})
    document = json.loads(await request.read())
    messages = document if isinstance(document, list) else [document]
    first = False
    for message in messages:
        if isinstance(message, dict) and message.get("method") == "tools/call":
            params = message.get("params") or {}
            tag = str((params.get("arguments") or {}).get("tag"))
            calls = CALLS.setdefault(tag, [])
            first = first or not calls
            calls.append({"tool": params.get("name"), "batch": isinstance(document, list)})
    if first:
        assert request.transport is not None
        request.transport.abort()
        raise asyncio.CancelledError  # nothing is written on the aborted connection
    answers = [a for a in (_answer(m) for m in messages if isinstance(m, dict)) if a is not None]
    if not answers:
        return web.Response(status=202)
    return web.json_response(answers if isinstance(document, list) else answers[0])


async def hits(request: web.Request) -> web.Response:
    return web.json_response({"hits": CALLS.get(request.query["tag"], [])})


def main() -> None:
    app = web.Application()
    app.router.add_route("*", "/mcp", mcp)
    app.router.add_get("/_hits", hits)
    serve(app)


if __name__ == "__main__":
    main()
