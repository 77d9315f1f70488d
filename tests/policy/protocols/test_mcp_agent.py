"""An agent framework driving MCP tools through mend: pydantic-ai's ``MCPToolset`` with a
scripted ``FunctionModel`` (no LLM), direct and through mend.

The model's script calls one tool with arguments that fail, then answers. What the framework
hands the model back is recorded: direct, the tool's own text; through mend, the recovery plan
with its pointer, wait or stop. Connecting the toolset through mend costs what it costs direct,
on an SDK 2.x server and on an SDK 1.x one (which answers server/discover with a 400).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp.server.mcpserver import MCPServer
from mcp_server_time.server import create_server as time_server
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.conftest import StartMend
from tests.mcp_servers import asgi_server, sdk1_server, sdk1_site


@pytest.fixture(scope="session")
def sdk1() -> Path:
    """The MCP SDK 1.x, installed once beside the virtualenv (tests/mcp_servers.py)."""
    return sdk1_site()


@asynccontextmanager
async def time_server_behind_mend(start_mend: StartMend) -> AsyncIterator[tuple[str, str]]:
    """The reference time server over streamable HTTP: (direct URL, URL through mend)."""
    server: MCPServer = time_server("Europe/Paris")
    async with asgi_server(server.streamable_http_app(json_response=True)) as upstream:
        mend = await start_mend(upstream)
        yield f"{upstream}/mcp", str(mend.client.make_url("/mcp"))


async def handed_back(url: str, tool: str, arguments: dict[str, Any]) -> tuple[float, str]:
    """Seconds to connect the toolset, and the text the framework hands the model after the
    scripted model calls ``tool`` with ``arguments``."""
    seen: list[ModelMessage] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart(tool, arguments)])
        seen.append(messages[-1])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(model), toolsets=[MCPToolset(url)])
    started = time.monotonic()
    async with agent:
        connected = time.monotonic() - started
        result = await agent.run("What time is it on Mars?")
    assert result.output == "done"
    request = seen[0]
    assert isinstance(request, ModelRequest)
    return connected, str(getattr(request.parts[0], "content", ""))


async def test_the_model_is_handed_the_plan_for_a_failing_tool(start_mend: StartMend) -> None:
    """An unknown time zone: direct, the model reads the tool's text; through mend, a plan that
    names /timezone to change, keeps the value it sent, and says not to resend it unchanged."""
    arguments = {"timezone": "Mars/Olympus"}
    async with time_server_behind_mend(start_mend) as (direct_url, mend_url):
        _, direct = await handed_back(direct_url, "get_current_time", arguments)
        _, proxied = await handed_back(mend_url, "get_current_time", arguments)
    assert "Invalid timezone" in direct
    assert proxied.startswith("Error VALIDATION_FAILED")
    assert "Change /timezone" in proxied
    assert "Mars/Olympus" in proxied
    assert '"field":"/timezone"' in proxied


async def test_the_toolset_connects_through_mend(start_mend: StartMend) -> None:
    """pydantic-ai's toolset connects to an SDK 2.x server through mend and gets the tool's
    answer, as direct (speed is the bench's to measure, not a timed test's)."""
    async with time_server_behind_mend(start_mend) as (direct_url, mend_url):
        _, direct = await handed_back(direct_url, "get_current_time", {"timezone": "UTC"})
        _, proxied = await handed_back(mend_url, "get_current_time", {"timezone": "UTC"})
    assert "UTC" in direct
    assert "UTC" in proxied, proxied


async def test_the_toolset_connects_to_an_sdk1_server_through_mend(
    start_mend: StartMend, sdk1: Path
) -> None:
    """On an SDK 1.x server the toolset connects through mend, and a tool failure reaches the
    model as a plan. (That the server/discover probe is not slowed down is pinned by its
    mechanism: test_mcp.py::test_an_sdk1_servers_discover_refusal_keeps_its_status_and_id.)"""
    async with sdk1_server(sdk1, json_response=True) as upstream:
        mend = await start_mend(upstream)
        _, proxied = await handed_back(
            str(mend.client.make_url("/mcp")), "create_issue", {"title": "explode", "priority": 1}
        )
    assert proxied.startswith("Error TOOL_FAILED")
