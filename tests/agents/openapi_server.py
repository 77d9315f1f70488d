"""FastMCP's OpenAPI tools generated from the failing REST app, run as a process of its own.

``python tests/agents/openapi_server.py REST_URL PORT`` in the fastmcp environment
(``tests.agents.envs``): reads ``REST_URL/openapi.json`` and serves its operations as MCP tools
over streamable HTTP at ``/mcp``, each calling the REST app. A failing answer becomes FastMCP's
``ToolError``: ``Error calling tool '<name>': HTTP error <status>: <reason> - <body>`` (a 429 is
replaced by FastMCP's own "Rate limited by upstream API, please retry later").
"""

from __future__ import annotations

import sys

import httpx2
from fastmcp import FastMCP


def main() -> None:
    rest, port = sys.argv[1], int(sys.argv[2])
    spec = httpx2.get(f"{rest}/openapi.json", timeout=10).json()
    client = httpx2.AsyncClient(base_url=rest, timeout=10)
    server = FastMCP.from_openapi(spec, client=client, name="shop-openapi")
    server.run(transport="http", host="127.0.0.1", port=port, path="/mcp", log_level="warning")


if __name__ == "__main__":
    main()
