"""The fastmcp ``Client`` (no model: a program calling a tool), streamable HTTP.

By design it raises on an ``isError`` result (``ToolError``, the result's text as its message)
as on a JSON-RPC error (``McpError``); what its caller reads is that exception's text, recorded
as ``model_read`` with the exception in ``raised``. A result without ``isError`` is its text.
"""

from __future__ import annotations

from typing import Any

from common import RaisedReading, main
from fastmcp import Client
from fastmcp.exceptions import ToolError


async def call(url: str, tool: str, arguments: dict[str, Any]) -> str:
    async with Client(url, timeout=30) as client:
        await client.list_tools()  # as an agent does, to show the model its tools
        try:
            result = await client.call_tool(tool, arguments)
        except ToolError as exc:
            raise RaisedReading(str(exc), exc) from exc
        except Exception as exc:  # a JSON-RPC error: McpError / MCPError
            raise RaisedReading(str(exc), exc) from exc
    return "\n".join(getattr(block, "text", "") for block in result.content)


if __name__ == "__main__":
    main(call)
