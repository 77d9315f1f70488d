"""An MCP server on the official Python SDK 1.x (FastMCP), run as its own process.

``python tests/mcp_sdk1_server.py PORT json|sse`` with the 1.x SDK first on ``PYTHONPATH``
(``tests.mcp_servers.sdk1_site``): the main virtualenv holds SDK 2.x. The tools fail as
``tests/policy/protocols/test_mcp.py``'s 2.x server's do.
"""

from __future__ import annotations

import sys

import uvicorn
from mcp.server.fastmcp import FastMCP


def main() -> None:
    port, answers = int(sys.argv[1]), sys.argv[2]
    server = FastMCP("issues-v1", json_response=answers == "json")

    @server.tool()
    def create_issue(title: str, priority: int) -> str:
        """Create an issue."""
        if title == "explode":
            raise RuntimeError("insert failed")
        return f"created {title} with priority {priority}"

    app = server.streamable_http_app()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
