"""The shop's failing tools on the official Python SDK 1.x (FastMCP), run as its own process.

``python tests/agents/sdk1_failing_server.py PORT`` with the 1.x SDK first on ``PYTHONPATH``
(``tests.mcp_servers.sdk1_site``): the main virtualenv holds SDK 2.x. SDK 1.x turns every
exception a tool raises into an ``isError`` result with the exception's own text ("Error
executing tool <name>: ..."), validates arguments against the input schema itself, and answers
an unknown tool with an ``isError`` result too.
"""

from __future__ import annotations

import sys

import uvicorn
from mcp.server.fastmcp import FastMCP
from mcp.types import Tool, ToolAnnotations

SECRET = "postgres://admin:Pl4ntedSecret@db.internal:5432/shop"
MARKER = "PLANTED_MARKER_4c1d"
TRACE = (
    "Traceback (most recent call last):\n"
    '  File "/srv/shop/reports.py", line 88, in export_report\n'
    f"    raise IOError({MARKER!r})\n"
)


class Shop(FastMCP):
    """Lists ``legacy_lookup``, a tool it no longer has (a listing gone stale)."""

    async def list_tools(self) -> list[Tool]:
        schema = {"type": "object", "properties": {"ref": {"type": "string"}}}
        gone = Tool(name="legacy_lookup", description="Look a legacy ref up.", inputSchema=schema)
        return [*await super().list_tools(), gone]


def main() -> None:
    port = int(sys.argv[1])
    server = Shop("shop-v1", json_response=True)
    reads = ToolAnnotations(readOnlyHint=True, idempotentHint=True)
    writes = ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False)

    @server.tool(annotations=writes)
    def cancel_order(order_id: str) -> str:
        """Cancel an order."""
        raise ValueError(f"Order {order_id} cannot be cancelled: it has already shipped")

    @server.tool(annotations=reads)
    def search_products(query: str) -> str:
        """Search the catalogue (a REST backend behind)."""
        raise RuntimeError("Backend answered 429 Too Many Requests. Retry-After: 7")

    @server.tool(annotations=writes)
    def create_product(name: str, price: float) -> str:
        """Create a product."""
        return f"created {name}"

    @server.tool(annotations=reads)
    def get_inventory(sku: str) -> str:
        """Stock of a SKU."""
        raise TimeoutError("Inventory service did not answer within 30 s")

    @server.tool(annotations=reads)
    def get_order(order_id: str) -> str:
        """An order."""
        raise LookupError(f"Order {order_id} not found")

    @server.tool(annotations=reads)
    def export_report(month: str) -> str:
        """Export a monthly report."""
        raise RuntimeError(f"export failed: could not write to {SECRET}\n{TRACE}")

    app = server.streamable_http_app()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
