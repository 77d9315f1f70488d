"""MCP servers that fail in many ways, each run as a process of its own on a free loopback port.

- ``sdk2``: a shop's tools on the official SDK 2.x ``MCPServer`` (the main virtualenv), one tool
  per way a tool fails: a state conflict said in prose, a wrapped REST 429 and 422, a JSON-RPC
  -32603 (an ``MCPError`` raised in the tool), an unknown tool (listed, then gone), invalid
  arguments, a missing record, a missing scope, a quota, a secret and a traceback in the text.
- ``sdk1``: ``tests/agents/sdk1_failing_server.py`` on the SDK 1.x
  (``tests.mcp_servers.sdk1_site``), fewer ways.
- ``openapi``: FastMCP's OpenAPI tools (``tests/agents/openapi_server.py``, in the fastmcp
  environment) generated from ``tests/agents/rest_app.py``, a small FastAPI app whose endpoints
  answer 404, 409, 422, 429 with ``Retry-After`` and 503, and which they call over HTTP.

``python -m tests.agents.servers PORT`` serves the first, ``python -m tests.agents.rest_app PORT``
the REST app; ``serve`` starts any of them and stops it by its PID. The wording of each failure
is the data the cases table (``tests/agents/cases.yaml``) states facts about.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import Tool, ToolAnnotations

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
START_TIMEOUT_S = 60.0
_PR_SET_PDEATHSIG = 1

#: planted in the internal failure's text: none of it may reach the model through mend
SECRET = "postgres://admin:Pl4ntedSecret@db.internal:5432/shop"
MARKER = "PLANTED_MARKER_4c1d"
TRACE = (
    "Traceback (most recent call last):\n"
    '  File "/srv/shop/reports.py", line 88, in export_report\n'
    f"    raise IOError({MARKER!r})\n"
)
LEAKS = (SECRET, "Pl4ntedSecret", MARKER, "/srv/shop", "Traceback (most recent call last)")

FASTAPI_422 = (
    '{"detail":[{"type":"greater_than","loc":["body","price"],'
    '"msg":"Input should be greater than 0","input":-5,"ctx":{"gt":0}}]}'
)


def shop_server() -> MCPServer:
    """The SDK 2.x shop: every tool fails, each its own way."""

    class Shop(MCPServer):
        """Lists ``legacy_lookup``, a tool it no longer has (a listing gone stale): calling it
        takes the SDK's own unknown-tool path."""

        async def list_tools(self) -> list[Tool]:
            schema = {"type": "object", "properties": {"ref": {"type": "string"}}}
            gone = Tool(
                name="legacy_lookup", description="Look a legacy ref up.", inputSchema=schema
            )
            return [*await super().list_tools(), gone]

    server = Shop("shop")
    reads = ToolAnnotations(readOnlyHint=True, idempotentHint=True)
    writes = ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False)

    @server.tool(annotations=writes)
    def cancel_order(order_id: str) -> str:
        """Cancel an order."""
        raise ToolError(f"Order {order_id} cannot be cancelled: it has already shipped")

    @server.tool(annotations=reads)
    def search_products(query: str) -> str:
        """Search the catalogue (a REST backend behind)."""
        raise ToolError("Backend answered 429 Too Many Requests. Retry-After: 7")

    @server.tool(annotations=writes)
    def create_product(name: str, price: float) -> str:
        """Create a product (a REST backend behind)."""
        raise ToolError(f"Backend answered 422 Unprocessable Entity. Body: {FASTAPI_422}")

    @server.tool(annotations=reads)
    def get_inventory(sku: str) -> str:
        """Stock of a SKU."""
        raise MCPError(code=-32603, message="Inventory service did not answer within 30 s")

    @server.tool(annotations=reads)
    def get_order(order_id: str) -> str:
        """An order."""
        raise ToolError(f"Order {order_id} not found")

    @server.tool(annotations=writes)
    def refund_order(order_id: str, amount: float) -> str:
        """Refund part of an order."""
        raise ToolError("Forbidden: the API token lacks the orders:refund scope")

    @server.tool(annotations=writes)
    def send_sms(to: str, text: str) -> str:
        """Send a text message."""
        raise ToolError(
            "SMS quota exceeded: 1000 of 1000 messages used this month; "
            "the quota resets on 2026-08-01"
        )

    @server.tool(annotations=reads)
    def export_report(month: str) -> str:
        """Export a monthly report."""
        raise ToolError(f"export failed: could not write to {SECRET}\n{TRACE}")

    return server


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Served:
    """A server process: its name, base URL, log file."""

    name: str
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def _die_with_parent() -> Callable[[], object] | None:
    """Have the child SIGTERMed when the test run dies (Linux), so no server outlives it."""
    if sys.platform != "linux":
        return None
    return partial(ctypes.CDLL(None, use_errno=True).prctl, _PR_SET_PDEATHSIG, signal.SIGTERM)


def wait_listening(served: Served, port: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if served.proc.poll() is not None:
            tail = served.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{served.name} exited with {served.proc.returncode}:\n{tail}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{served.name} did not listen on {port} in {START_TIMEOUT_S} s")


@contextmanager
def serve(
    name: str, argv: Callable[[int], list[str]], logs: Path, *, env: dict[str, str] | None = None
) -> Iterator[Served]:
    """``argv(port)`` as a process on a free loopback port; stopped by its PID after."""
    port = free_port()
    log = logs / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv(port),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
            env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"},
            preexec_fn=_die_with_parent(),  # noqa: PLW1509 (one prctl call, see there)
        )
    served = Served(name, proc, f"http://127.0.0.1:{port}", log)
    try:
        wait_listening(served, port)
        yield served
    finally:
        served.stop()


def main() -> None:
    port = int(sys.argv[1])
    app = shop_server().streamable_http_app(json_response=True)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
