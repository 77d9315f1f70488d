"""The scripted agent again, this time reaching the legacy API only as MCP tools: mend's
``mcp_tools`` serves the API's OpenAPI operations as tools (docs/openapi.md "MCP tools from the
document"), and the agent speaks MCP with the official SDK's client.

It reads only what a tool's failure carries: the envelope in ``_meta["mend/error"]``, whose
pointers are into the tool's arguments and whose ``next_operation`` is a tool's name. It does
what the envelope's ``action`` says, as ``demo/agent.py`` does over HTTP.

    python -m demo.tool_agent --url http://127.0.0.1:8080/tools/mcp
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mcp.client import Client
from mcp_types import CallToolResult

from demo.agent import Outcome, RunReport, TaskResult, apply_fixes, format_report, plan_fixes

#: Calls one task may make, and the longest wait a retry_after_ms is honoured for.
MAX_CALLS = 5
MAX_WAIT_S = 10.0


@dataclass(frozen=True)
class ToolTask:
    name: str
    kind: str
    tool: str
    arguments: dict[str, Any]


def tool_tasks(order_id: int) -> list[ToolTask]:
    """The HTTP agent's tasks that the API's document describes, as tool calls."""
    return [
        ToolTask(
            "create an order", "invalid arguments", "createOrder", {"sku": "widget-1", "qty": 0}
        ),
        ToolTask("download an invoice", "Spring 500", "getInvoice", {"order_id": order_id}),
        ToolTask("track an order", "429 Retry-After", "getTracking", {"order_id": order_id}),
        ToolTask("list the catalog", "nginx 503", "getCatalog", {}),
        ToolTask("ship an order", "409 precondition", "shipOrder", {"order_id": order_id}),
    ]


class ToolAgent:
    def __init__(self, client: Client) -> None:
        self.client = client
        self.calls = 0

    async def call(self, tool: str, arguments: dict[str, Any]) -> CallToolResult:
        self.calls += 1
        return await self.client.call_tool(tool, arguments)

    async def run_task(self, task: ToolTask) -> TaskResult:
        arguments, trail = dict(task.arguments), []
        outcome: Outcome = "failed"
        for _ in range(MAX_CALLS):
            result = await self.call(task.tool, arguments)
            if not result.is_error:
                trail.append(f"{task.tool}: ok")
                outcome = "completed"
                break
            envelope = (result.meta or {}).get("mend/error") or {}
            action = envelope.get("action")
            trail.append(f"{task.tool}: {envelope.get('code')} -> {action}")
            if action == "retry":
                await asyncio.sleep(min(MAX_WAIT_S, (envelope.get("retry_after_ms") or 0) / 1000))
            elif action == "fix_request" and (fixes := plan_fixes(envelope)):
                arguments = apply_fixes(arguments, fixes)
                trail[-1] += " " + ", ".join(f"{f.pointer}={f.value!r}" for f in fixes)
            elif action == "call_other_operation" and envelope.get("next_operation"):
                first = str(envelope["next_operation"])
                done = await self.call(first, dict(envelope.get("next_operation_args") or {}))
                trail.append(f"{first}: {'ok' if not done.is_error else 'failed'}")
            elif action in ("escalate", "report_bug"):
                outcome = "escalated"
                break
            else:
                break
        return TaskResult(task.name, task.kind, outcome, self.calls, trail)


async def run_tool_agent(url: str, *, order_id: int | None = None) -> tuple[RunReport, int]:
    """Work every task through ``url`` (mend's ``mcp_tools``); the report and the tools seen."""
    order = order_id if order_id is not None else random.randint(1000, 9999)
    async with Client(url) as client:
        tools = (await client.list_tools()).tools
        agent = ToolAgent(client)
        results = [await agent.run_task(task) for task in tool_tasks(order)]
    return RunReport("tools", url, results, agent.calls), len(tools)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.tool_agent", description=__doc__)
    parser.add_argument(
        "--url", required=True, help="mend's MCP tools, e.g. http://127.0.0.1:8080/tools/mcp"
    )
    args = parser.parse_args(argv)
    report, tools = asyncio.run(run_tool_agent(args.url))
    print(f"{tools} tools listed")
    print(format_report(report, label="MCP tools through mend", color=sys.stdout.isatty()))
    return 0 if report.completed else 1


if __name__ == "__main__":
    raise SystemExit(main())
