"""``mcp_tools``: a REST API's OpenAPI operations served as MCP tools (docs/contract.md §9).

The API is a real FastAPI app (its own OpenAPI 3.1 document) under uvicorn; mend runs in
process on loopback; the agents are the official MCP SDK's ``Client`` in its default mode
(``auto``: revision 2026-07-28, stateless, ``server/discover``) and its ``legacy`` mode (the
``initialize`` handshake), and pydantic-ai driving the same tools with a scripted model.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from aiohttp import web
from aiohttp.test_utils import TestServer
from mcp.client import Client
from mcp_types import CallToolResult, ToolListChangedNotification

from tests.conftest import Mend, StartMend, StartUpstream
from tests.installs import npm_installed
from tests.mcptools_app import DSN, build
from tests.runtime.test_app import free_port

MODES = ["auto", "legacy"]
TIMEOUT_S = 20


@dataclass
class Inventory:
    url: str
    document: Path
    hits: dict[str, int]


@pytest.fixture
async def inventory(tmp_path: Path) -> AsyncIterator[Inventory]:
    """The REST app under uvicorn on a free port, and its OpenAPI document in a file."""
    app, hits = build()
    document = tmp_path / "openapi.json"
    document.write_text(json.dumps(app.openapi()))
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    task = asyncio.create_task(server.serve())
    async with asyncio.timeout(10):
        while not server.started:  # noqa: ASYNC110 (uvicorn offers a flag, not an event)
            await asyncio.sleep(0.01)
    try:
        yield Inventory(f"http://127.0.0.1:{port}", document, hits)
    finally:
        server.should_exit = True
        await task


async def mend_for(start_mend: StartMend, inventory: Inventory, **route: Any) -> Mend:
    return await start_mend(
        inventory.url, route={"openapi": inventory.document, "mcp_tools": "/mcp", **route}
    )


@asynccontextmanager
async def agent(mend: Mend, mode: str) -> AsyncIterator[Client]:
    """The SDK client on mend's tools, connected in ``mode``."""
    url = str(mend.client.make_url("/mcp"))
    async with asyncio.timeout(TIMEOUT_S), Client(url, mode=mode) as client:
        yield client


async def call_tool(
    start_mend: StartMend, inventory: Inventory, mode: str, tool: str, arguments: dict[str, Any]
) -> CallToolResult:
    """One tool call through mend's tools on the inventory API, the SDK client in ``mode``."""
    mend = await mend_for(start_mend, inventory)
    async with agent(mend, mode) as client:
        return await client.call_tool(tool, arguments)


def envelope(result: CallToolResult) -> dict[str, Any]:
    assert result.is_error is True
    assert result.meta is not None
    found: dict[str, Any] = result.meta["mend/error"]
    return found


def text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


@pytest.mark.parametrize("mode", MODES)
async def test_tools_listed_with_their_schemas(
    start_mend: StartMend, inventory: Inventory, mode: str
) -> None:
    """Every operation is a tool named by its operationId, with required, enum and pattern."""
    mend = await mend_for(start_mend, inventory)
    async with agent(mend, mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    documented = {"get_item", "list_items", "create_item", "delete_item", "item_report"}
    assert set(tools) == {*documented, "item_history"}
    create = tools["create_item"].input_schema
    assert create["required"] == ["name", "priority", "qty"]
    assert create["properties"]["priority"]["enum"] == ["low", "high"]
    assert create["properties"]["name"]["pattern"] == "^[a-z][a-z0-9-]{1,30}$"
    assert tools["get_item"].input_schema["required"] == ["item_id"]
    assert tools["get_item"].output_schema is not None
    assert tools["get_item"].output_schema["properties"]["id"]["type"] == "integer"


@pytest.mark.parametrize(("mode", "revision"), [("auto", "2026-07-28"), ("legacy", "2025-11-25")])
async def test_sdk_modes_negotiate_their_revision(
    start_mend: StartMend, inventory: Inventory, mode: str, revision: str
) -> None:
    """The SDK's default mode gets 2026-07-28 (server/discover), its legacy mode the handshake."""
    mend = await mend_for(start_mend, inventory)
    async with agent(mend, mode) as client:
        assert client.protocol_version == revision
        assert client.server_info is not None
        assert client.server_info.name == "mend:default"


async def test_annotations_follow_the_method(start_mend: StartMend, inventory: Inventory) -> None:
    """GET is read-only, DELETE idempotent and destructive, POST neither."""
    mend = await mend_for(start_mend, inventory)
    async with agent(mend, "auto") as client:
        tools = {t.name: t.annotations for t in (await client.list_tools()).tools}
    get, delete, post = tools["get_item"], tools["delete_item"], tools["create_item"]
    assert get is not None
    assert delete is not None
    assert post is not None
    assert (get.read_only_hint, get.destructive_hint) == (True, False)
    assert (delete.idempotent_hint, delete.destructive_hint) == (True, True)
    assert (post.read_only_hint, post.idempotent_hint) == (False, False)


@pytest.mark.parametrize("mode", MODES)
async def test_success_is_structured_content(
    start_mend: StartMend, inventory: Inventory, mode: str
) -> None:
    """A 2xx answer is the JSON body in structuredContent and as text."""
    result = await call_tool(start_mend, inventory, mode, "get_item", {"item_id": 1})
    assert result.is_error is False
    body = {"id": 1, "name": "bolts", "priority": "low", "qty": 5}
    assert result.structured_content == body
    assert json.loads(text(result)) == body


async def test_array_answer_is_wrapped_as_its_output_schema_says(
    start_mend: StartMend, inventory: Inventory
) -> None:
    """A JSON array answer comes as {"result": [...]}, as the tool's outputSchema names it."""
    result = await call_tool(start_mend, inventory, "auto", "list_items", {"limit": 1})
    assert result.structured_content == {
        "result": [{"id": 1, "name": "bolts", "priority": "low", "qty": 5}]
    }


@pytest.mark.parametrize("mode", MODES)
async def test_invalid_call_refused_before_the_upstream(
    start_mend: StartMend, inventory: Inventory, mode: str
) -> None:
    """Invalid arguments never reach the API, and both bad fields are named as arguments."""
    mend = await mend_for(start_mend, inventory)
    async with agent(mend, mode) as client:
        before = inventory.hits["count"]
        result = await client.call_tool(
            "create_item", {"name": "Bad Name", "priority": "urgent", "qty": 2}
        )
    assert inventory.hits["count"] == before
    error = envelope(result)
    assert error["code"] == "VALIDATION_FAILED"
    assert {f["field"] for f in error["invalid_fields"]} == {"/name", "/priority"}
    assert text(result).startswith("Error VALIDATION_FAILED")
    assert "/priority" in text(result)


async def test_missing_path_argument_is_named(start_mend: StartMend, inventory: Inventory) -> None:
    """A required path parameter left out is an invalid argument, not a request to a wrong path."""
    mend = await mend_for(start_mend, inventory)
    async with agent(mend, "auto") as client:
        before = inventory.hits["count"]
        result = await client.call_tool("get_item", {})
    assert inventory.hits["count"] == before
    fields = envelope(result)["invalid_fields"]
    assert [(f["field"], f["location"]) for f in fields] == [("/item_id", "path")]


async def test_unknown_argument_is_refused(start_mend: StartMend, inventory: Inventory) -> None:
    """An argument the tool does not have is named, with the ones it has."""
    result = await call_tool(
        start_mend, inventory, "auto", "get_item", {"item_id": 1, "verbose": True}
    )
    field = envelope(result)["invalid_fields"][0]
    assert field["field"] == "/verbose"
    assert field["allowed_values"] == {"enum": ["item_id"]}


@pytest.mark.parametrize("mode", MODES)
async def test_upstream_404_is_a_tool_error(
    start_mend: StartMend, inventory: Inventory, mode: str
) -> None:
    """The API's 404 is isError with the plan as text and the envelope in _meta."""
    result = await call_tool(start_mend, inventory, mode, "get_item", {"item_id": 9})
    error = envelope(result)
    assert (error["code"], error["upstream_status"]) == ("RESOURCE_NOT_FOUND", 404)
    assert error["message"] == "Item 9 not found"
    assert text(result).startswith("Error RESOURCE_NOT_FOUND")


async def test_upstream_409_is_a_tool_error(start_mend: StartMend, inventory: Inventory) -> None:
    """The API's 409 is a conflict the model is told to reconcile."""
    result = await call_tool(
        start_mend,
        inventory,
        "legacy",
        "create_item",
        {"name": "bolts", "priority": "high", "qty": 3},
    )
    error = envelope(result)
    assert (error["code"], error["category"], error["upstream_status"]) == (
        "CONFLICT",
        "conflict",
        409,
    )
    assert "bolts" in error["message"]


async def test_plan_names_the_tool_not_the_request(
    start_mend: StartMend, inventory: Inventory
) -> None:
    """The recovery plan says to call the tool again, not to send POST /items."""
    result = await call_tool(
        start_mend, inventory, "auto", "create_item", {"name": "bolts", "priority": "low", "qty": 1}
    )
    assert "Call create_item again." in envelope(result)["steps"]
    assert "POST /items" not in text(result).split("\n\n")[0]


@pytest.mark.parametrize("mode", MODES)
async def test_500_trace_and_dsn_never_reach_the_model(
    start_mend: StartMend, inventory: Inventory, mode: str
) -> None:
    """The API's traceback and database DSN are in no part of the tool's result."""
    result = await call_tool(start_mend, inventory, mode, "item_report", {"item_id": 1})
    error = envelope(result)
    assert error["upstream_status"] == 500
    whole = result.model_dump_json(by_alias=True)
    for secret in ("Traceback", "reports.py", "Sup3rSecretPw", "db-7.internal.corp", DSN):
        assert secret not in whole


async def test_envelope_in_structured_content_without_output_schema(
    start_mend: StartMend, inventory: Inventory
) -> None:
    """A tool without an outputSchema carries the envelope in structuredContent too."""
    result = await call_tool(start_mend, inventory, "auto", "item_report", {"item_id": 1})
    assert result.structured_content == {"error": envelope(result)}


async def test_envelope_not_in_structured_content_with_output_schema(
    start_mend: StartMend, inventory: Inventory
) -> None:
    """A tool with an outputSchema gets no structuredContent its schema would refuse."""
    result = await call_tool(start_mend, inventory, "auto", "get_item", {"item_id": 9})
    assert result.is_error is True
    assert result.structured_content is None


@pytest.mark.parametrize("mode", MODES)
async def test_unknown_tool_points_to_tools_list(
    start_mend: StartMend, inventory: Inventory, mode: str
) -> None:
    """A call to a tool that does not exist is told to call tools/list."""
    result = await call_tool(start_mend, inventory, mode, "get_widget", {"id": 1})
    error = envelope(result)
    assert (error["code"], error["next_operation"]) == ("TOOL_NOT_FOUND", "tools/list")
    assert error["applied"] == "no"  # answered by mend: nothing was sent
    assert "tools/list" in text(result)


async def test_tool_errors_are_counted_per_route(
    start_mend: StartMend, inventory: Inventory
) -> None:
    """A tool's failure is an envelope of the route in mend's metrics and log."""
    mend = await mend_for(start_mend, inventory)
    async with agent(mend, "auto") as client:
        await client.call_tool("get_item", {"item_id": 9})
    labels = {
        "code": "RESOURCE_NOT_FOUND",
        "category": "not_found",
        "route": "default",
        "upstream_status": "404",
        "rule": "fallback.404",
        "protocol": "http",
    }
    assert mend.metric("mend_errors_total", **labels) == 1
    lines = [line for line in mend.log_lines() if line.get("code") == "RESOURCE_NOT_FOUND"]
    assert [line["path"] for line in lines] == ["/items/9"]


async def test_pydantic_ai_agent_recovers_from_the_envelope(
    start_mend: StartMend, inventory: Inventory
) -> None:
    """A pydantic-ai agent's invalid call comes back as a retry it fixes from the envelope."""
    from pydantic_ai import Agent  # noqa: PLC0415 (the agent framework loads only here)
    from pydantic_ai.mcp import MCPToolset  # noqa: PLC0415
    from pydantic_ai.messages import (  # noqa: PLC0415
        ModelMessage,
        ModelResponse,
        RetryPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: PLC0415

    mend = await mend_for(start_mend, inventory)
    told: list[str] = []
    offered: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        offered[:] = [tool.name for tool in info.function_tools]
        parts = messages[-1].parts
        said = [
            str(p.content)
            for p in parts
            if isinstance(p, RetryPromptPart | ToolReturnPart) and p.tool_name == "create_item"
        ]
        if said and not said[0].startswith("Error "):
            return ModelResponse(parts=[TextPart(f"created: {said[0]}")])
        if said:  # repair every field the envelope names, with what it suggests
            told.append(said[0])
            error = json.loads(said[0].strip().splitlines()[-1])["error"]
            args: dict[str, Any] = {"name": "Washers!", "priority": "urgent", "qty": 2}
            for field in error["invalid_fields"]:
                key = field["field"].lstrip("/")
                args[key] = field["suggested_value"] or args[key].lower().strip("!")
            return ModelResponse(parts=[ToolCallPart("create_item", args)])
        call = {"name": "Washers!", "priority": "urgent", "qty": 2}
        return ModelResponse(parts=[ToolCallPart("create_item", call)])

    toolset: Any = MCPToolset(str(mend.client.make_url("/mcp")))
    agent = Agent(FunctionModel(model), toolsets=[toolset])
    async with asyncio.timeout(TIMEOUT_S):
        result = await agent.run("Add two washers of low priority.")
    assert "create_item" in offered
    assert [t.split(":")[0] for t in told] == ["Error VALIDATION_FAILED"]
    assert "'name': 'washers'" in result.output


def many_operations(count: int) -> dict[str, Any]:
    """An OpenAPI 3.1 document of ``count`` GET operations."""
    ok = {"200": {"description": "ok"}}
    paths = {
        f"/things/t{i}": {"get": {"operationId": f"thing_{i}", "responses": ok}}
        for i in range(count)
    }
    return {"openapi": "3.1.0", "info": {"title": "many", "version": "1"}, "paths": paths}


async def test_tools_list_is_paginated(
    start_mend: StartMend, inventory: Inventory, tmp_path: Path
) -> None:
    """150 operations come as a page of 100 and a page of 50, joined by nextCursor."""
    document = tmp_path / "many.json"
    document.write_text(json.dumps(many_operations(150)))
    mend = await start_mend(inventory.url, route={"openapi": document, "mcp_tools": "/mcp"})
    async with agent(mend, "legacy") as client:
        first = await client.list_tools()
        assert first.next_cursor is not None
        second = await client.list_tools(cursor=first.next_cursor)
    names = [t.name for t in first.tools + second.tools]
    assert (len(first.tools), len(second.tools), second.next_cursor) == (100, 50, None)
    assert sorted(names) == sorted(f"thing_{i}" for i in range(150))


async def reload(mend: Mend) -> None:
    """Reload mend's configuration (its documents with it), as SIGHUP does."""
    server: Any = mend.client.server
    await asyncio.to_thread(server.mend.proxy.store.reload)


async def test_reload_notifies_legacy_sessions(
    start_mend: StartMend, inventory: Inventory, tmp_path: Path
) -> None:
    """A session of the handshake revisions hears notifications/tools/list_changed."""
    document = tmp_path / "many.json"
    document.write_text(json.dumps(many_operations(2)))
    mend = await start_mend(inventory.url, route={"openapi": document, "mcp_tools": "/mcp"})
    heard = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, ToolListChangedNotification):
            heard.set()

    url = str(mend.client.make_url("/mcp"))
    async with (
        asyncio.timeout(TIMEOUT_S),
        Client(url, mode="legacy", message_handler=on_message) as client,
    ):
        assert len((await client.list_tools()).tools) == 2
        document.write_text(json.dumps(many_operations(3)))
        await reload(mend)
        await heard.wait()
        assert len((await client.list_tools(cache_mode="refresh")).tools) == 3


async def test_reload_notifies_listeners(
    start_mend: StartMend, inventory: Inventory, tmp_path: Path
) -> None:
    """A 2026-07-28 client listening for tool changes hears the reload that changed them."""
    document = tmp_path / "many.json"
    document.write_text(json.dumps(many_operations(2)))
    mend = await start_mend(inventory.url, route={"openapi": document, "mcp_tools": "/mcp"})
    async with agent(mend, "auto") as client, client.listen(tools_list_changed=True) as events:
        document.write_text(json.dumps(many_operations(3)))
        await reload(mend)
        event = await anext(aiter(events))
        assert type(event).__name__ == "ToolsListChanged"
        assert len((await client.list_tools(cache_mode="refresh")).tools) == 3


async def test_unreachable_api_is_a_tool_error(start_mend: StartMend, inventory: Inventory) -> None:
    """An API nobody answers for is isError with UPSTREAM_UNREACHABLE, not a protocol error."""
    down = f"http://127.0.0.1:{free_port()}"
    mend = await start_mend(down, route={"openapi": inventory.document, "mcp_tools": "/mcp"})
    async with agent(mend, "auto") as client:
        result = await client.call_tool("get_item", {"item_id": 1})
    error = envelope(result)
    assert (error["code"], error["upstream_status"]) == ("UPSTREAM_UNREACHABLE", None)
    assert text(result).startswith("Error UPSTREAM_UNREACHABLE")


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--mcp-tools", "/mcp"], "mcp_tools: PATH needs openapi: FILE"),
        (["--mcp-tools", "mcp", "--openapi", "x.json"], "--mcp-tools: String should match"),
    ],
)
def test_operator_errors_are_one_line(flags: list[str], said: str) -> None:
    """A bad --mcp-tools is a `mend: error:` line and exit 2."""
    command = [sys.executable, "-m", "proxy", "run", "--upstream", "http://127.0.0.1:9", *flags]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith("mend: error: ")
    assert said in done.stderr


COLLIDING = {
    "openapi": "3.1.0",
    "info": {"title": "colliding", "version": "1"},
    "paths": {
        "/things/{id}": {
            "put": {
                "operationId": "put thing!",
                "parameters": [
                    {"name": "id", "in": "path", "required": True, "schema": {"type": "integer"}},
                    {"name": "id", "in": "query", "schema": {"type": "integer"}},
                    {"name": "Authorization", "in": "header", "schema": {"type": "string"}},
                ],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["name"],
                                "properties": {
                                    "id": {"type": "integer"},
                                    "name": {"type": "string"},
                                },
                            }
                        }
                    },
                },
                "responses": {"204": {"description": "done"}},
            }
        }
    },
}


def colliding_tool(tmp_path: Path) -> tuple[Any, Any]:
    from proxy.edge.mcptools.tools import Toolbox  # noqa: PLC0415
    from proxy.policy.openapi.spec import Spec  # noqa: PLC0415

    document = tmp_path / "colliding.json"
    document.write_text(json.dumps(COLLIDING))
    spec = Spec.load(document)
    return spec, Toolbox.of(spec).tools[0]


def test_colliding_names_get_their_location(tmp_path: Path) -> None:
    """A query parameter and a body property named like the path parameter are prefixed."""
    _, tool = colliding_tool(tmp_path)
    schema = tool.definition.input_schema
    assert tool.name == "put_thing"
    assert list(schema["properties"]) == ["id", "query_id", "body_id", "name"]
    assert schema["required"] == ["id", "name"]


def test_arguments_go_back_where_they_came_from(tmp_path: Path) -> None:
    """Each argument lands in its own part of the request: path, query, JSON body."""
    from proxy.config.route import Route  # noqa: PLC0415
    from proxy.edge.mcptools.call_request import http_call  # noqa: PLC0415
    from proxy.policy.openapi.spec import Mount  # noqa: PLC0415

    spec, tool = colliding_tool(tmp_path)
    mount = Mount.of(Route(name="r", prefix="/api", strip_prefix=True, upstream="http://u"))
    call = http_call(tool, {"id": 7, "query_id": 8, "body_id": 9, "name": "a b"}, spec, mount)
    assert (call.method, call.target) == ("PUT", "/api/things/7?id=8")
    assert json.loads(call.body or b"") == {"id": 9, "name": "a b"}
    assert call.violations == []


async def test_slow_api_is_a_timeout_tool_error(
    start_mend: StartMend, inventory: Inventory
) -> None:
    """An answer later than the route's read_timeout is isError with UPSTREAM_TIMEOUT."""
    mend = await mend_for(start_mend, inventory, read_timeout=0.5)
    async with agent(mend, "auto") as client:
        result = await client.call_tool("item_history", {"item_id": 1})
    error = envelope(result)
    assert (error["code"], error["upstream_status"]) == ("UPSTREAM_TIMEOUT", None)


async def test_repeated_failure_is_seen_across_calls(
    start_mend: StartMend, inventory: Inventory
) -> None:
    """The same failing tool call twice carries repeat, as the same HTTP request would."""
    mend = await mend_for(start_mend, inventory)
    async with agent(mend, "auto") as client:
        first = await client.call_tool("get_item", {"item_id": 9})
        second = await client.call_tool("get_item", {"item_id": 9})
    assert envelope(first).get("repeat") is None
    assert envelope(second)["repeat"]["count"] == 2


async def test_demo_tool_agent_follows_next_operation_to_a_tool(
    start_mend: StartMend, aiohttp_server: Callable[..., Awaitable[TestServer]]
) -> None:
    """The demo's MCP agent confirms before shipping: next_operation names the confirm tool."""
    from demo.legacy_api import create_legacy_app  # noqa: PLC0415
    from demo.run import DEMO_OPENAPI, DEMO_RULES, TOOLS_PATH  # noqa: PLC0415
    from demo.tool_agent import run_tool_agent  # noqa: PLC0415

    legacy = await aiohttp_server(create_legacy_app(retry_after_s=1, slow_seconds=0.3))
    route = {"openapi": DEMO_OPENAPI, "rules": (DEMO_RULES,), "mcp_tools": TOOLS_PATH}
    mend = await start_mend(str(legacy.make_url("/")).rstrip("/"), route=route)
    async with asyncio.timeout(TIMEOUT_S):
        report, tools = await run_tool_agent(str(mend.client.make_url(TOOLS_PATH)), order_id=5)
    outcomes = {r.name: (r.outcome, r.trail) for r in report.results}
    assert tools == 10
    assert outcomes["ship an order"] == (
        "completed",
        [
            "shipOrder: ORDER_NOT_CONFIRMED -> call_other_operation",
            "confirmOrder: ok",
            "shipOrder: ok",
        ],
    )
    assert outcomes["download an invoice"][0] == "escalated"


def test_too_deep_arguments_are_a_violation(tmp_path: Path) -> None:
    """Arguments nested deeper than JSON can be sent are an invalid call, not a crash."""
    from proxy.config.route import Route  # noqa: PLC0415
    from proxy.edge.mcptools.call_request import http_call  # noqa: PLC0415
    from proxy.policy.openapi.spec import Mount  # noqa: PLC0415

    deep: Any = "x"
    for _ in range(300):
        deep = [deep]
    spec, tool = colliding_tool(tmp_path)
    mount = Mount.of(Route(name="r", upstream="http://u"))
    call = http_call(tool, {"id": 1, "name": deep}, spec, mount)
    assert [(v.pointer, v.reason) for v in call.violations] == [
        ("", "the arguments nest too deep to be sent as JSON")
    ]


def sse_json(text: str) -> dict[str, Any]:
    """The JSON-RPC message of a one-event SSE answer (or a JSON one)."""
    data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    found: dict[str, Any] = json.loads(data[-1] if data else text)
    return found


@pytest.mark.parametrize("revision", ["2025-06-18", "2025-11-25"])
async def test_handshake_revision_on_the_wire(
    start_mend: StartMend, inventory: Inventory, revision: str
) -> None:
    """An initialize asking for a handshake revision gets it, and a tool error on the wire."""
    mend = await mend_for(start_mend, inventory)
    headers = {"Accept": "application/json, text/event-stream"}
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": revision,
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        },
    }
    async with asyncio.timeout(TIMEOUT_S):
        answer = await mend.client.post("/mcp", json=initialize, headers=headers)
        initialized = sse_json(await answer.text())["result"]
        assert initialized["protocolVersion"] == revision
        assert "Error <CODE>" in initialized["instructions"]
        assert initialized["capabilities"]["tools"] == {"listChanged": True}
        session = {
            "Mcp-Session-Id": answer.headers["Mcp-Session-Id"],
            "MCP-Protocol-Version": revision,
        }
        done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (
            await mend.client.post("/mcp", json=done, headers={**headers, **session})
        ).status == 202
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "get_item", "arguments": {"item_id": 9}},
        }
        answer = await mend.client.post("/mcp", json=call, headers={**headers, **session})
        result = sse_json(await answer.text())["result"]
    assert result["isError"] is True
    assert result["_meta"]["mend/error"]["code"] == "RESOURCE_NOT_FOUND"
    assert result["content"][0]["text"].startswith("Error RESOURCE_NOT_FOUND")


async def test_first_requests_at_once_share_one_server(
    start_mend: StartMend, inventory: Inventory, caplog: pytest.LogCaptureFixture
) -> None:
    """Agents arriving together on a fresh route all get the tools from one started server."""
    caplog.set_level(logging.INFO, logger="mcp.server.streamable_http_manager")
    mend = await mend_for(start_mend, inventory)

    async def names(mode: str) -> set[str]:
        async with agent(mend, mode) as client:
            return {t.name for t in (await client.list_tools()).tools}

    found = await asyncio.gather(*(names(mode) for mode in MODES * 3))
    assert all(f == found[0] and "get_item" in f for f in found)
    started = [
        r for r in caplog.records if r.getMessage() == "StreamableHTTP session manager started"
    ]
    assert len(started) == 1


async def test_compressed_answer_is_decoded(
    start_mend: StartMend, start_upstream: StartUpstream, tmp_path: Path
) -> None:
    """An API that gzips whatever the Accept-Encoding still gives structuredContent."""

    async def gzipped(request: web.Request) -> web.Response:
        body = gzip.compress(json.dumps({"status": "green"}).encode())
        headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
        return web.Response(body=body, headers=headers)

    upstream = await start_upstream({"GET /health": gzipped})
    ok = {
        "200": {
            "description": "ok",
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    }
    document = tmp_path / "health.json"
    document.write_text(
        json.dumps(
            {
                "openapi": "3.1.0",
                "info": {"title": "h", "version": "1"},
                "paths": {"/health": {"get": {"operationId": "health", "responses": ok}}},
            }
        )
    )
    mend = await start_mend(upstream, route={"openapi": document, "mcp_tools": "/mcp"})
    async with agent(mend, "auto") as client:
        result = await client.call_tool("health", {})
    assert result.is_error is False
    assert result.structured_content == {"status": "green"}


def one_operation(path: str, operation_id: str) -> dict[str, Any]:
    """An OpenAPI 3.1 document of one GET operation."""
    ok = {"200": {"description": "ok"}}
    return {
        "openapi": "3.1.0",
        "info": {"title": operation_id, "version": "1"},
        "paths": {path: {"get": {"operationId": operation_id, "responses": ok}}},
    }


async def test_endless_answer_is_cut_at_the_cap(
    start_mend: StartMend, start_upstream: StartUpstream, tmp_path: Path
) -> None:
    """A 2xx that never ends is cut at the tool's cap, said so, and the call returns."""

    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        while True:
            await response.write(b"x" * 65536)

    upstream = await start_upstream({"GET /feed": endless})
    document = tmp_path / "feed.json"
    document.write_text(json.dumps(one_operation("/feed", "feed")))
    mend = await start_mend(upstream, route={"openapi": document, "mcp_tools": "/mcp"})
    async with agent(mend, "auto") as client:
        result = await client.call_tool("feed", {})
    assert result.is_error is False
    assert text(result).endswith("bytes kept; cut here]")


def toolbox_of(tmp_path: Path, document: dict[str, Any]) -> Any:
    from proxy.edge.mcptools.tools import Toolbox  # noqa: PLC0415
    from proxy.policy.openapi.spec import Spec  # noqa: PLC0415

    path = tmp_path / "document.json"
    path.write_text(json.dumps(document))
    return Toolbox.of(Spec.load(path))


def test_operation_without_id_is_named_by_method_and_path(tmp_path: Path) -> None:
    """Without an operationId the tool is named from the method and the path."""
    document = one_operation("/items/{item_id}/notes", "x")
    operation = document["paths"]["/items/{item_id}/notes"]["get"]
    del operation["operationId"]
    operation["parameters"] = [
        {"name": "item_id", "in": "path", "required": True, "schema": {"type": "string"}}
    ]
    assert [t.name for t in toolbox_of(tmp_path, document).tools] == ["get_items_item_id_notes"]


def test_openapi_30_schemas_become_json_schema(tmp_path: Path) -> None:
    """A 3.0 document's nullable becomes a type list, refs are inlined, a cycle stops."""
    node = {
        "type": "object",
        "properties": {
            "label": {"type": "string", "nullable": True},
            "child": {"$ref": "#/components/schemas/Node"},
        },
    }
    body = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Node"}}}}
    document = {
        "openapi": "3.0.3",
        "info": {"title": "tree", "version": "1"},
        "paths": {
            "/nodes": {
                "post": {
                    "operationId": "add",
                    "requestBody": body,
                    "responses": {"200": {"description": "ok"}},
                }
            }
        },
        "components": {"schemas": {"Node": node}},
    }
    schema = toolbox_of(tmp_path, document).tools[0].definition.input_schema
    assert schema["properties"]["label"] == {"type": ["string", "null"]}
    assert schema["properties"]["child"] == {}  # Node again: the cycle stops, any value
    assert "$ref" not in json.dumps(schema)


async def test_each_mcp_session_is_its_own_cross_call_session(
    start_mend: StartMend, inventory: Inventory
) -> None:
    """Two handshake sessions from one address do not count each other's failures."""
    mend = await mend_for(start_mend, inventory)
    seen = []
    for _ in range(2):
        async with agent(mend, "legacy") as client:
            seen.append(envelope(await client.call_tool("get_item", {"item_id": 9})))
    assert [e.get("repeat") for e in seen] == [None, None]


@pytest.mark.parametrize("value", ["..", ".", ""])
def test_path_argument_cannot_move_the_path(tmp_path: Path, value: str) -> None:
    """A path argument that is no segment, or a dot segment, is refused, never sent."""
    from proxy.config.route import Route  # noqa: PLC0415
    from proxy.edge.mcptools.call_request import http_call  # noqa: PLC0415
    from proxy.policy.openapi.spec import Mount  # noqa: PLC0415

    spec, tool = colliding_tool(tmp_path)
    call = http_call(
        tool, {"id": value, "name": "a"}, spec, Mount.of(Route(name="r", upstream="http://u"))
    )
    assert [(v.pointer, v.location) for v in call.violations] == [("/id", "path")]
    assert call.target == "/things/-"


async def test_unknown_cursor_is_invalid_params(
    start_mend: StartMend, inventory: Inventory
) -> None:
    """A cursor mend never gave (a huge number, a word) is refused as invalid params."""
    from mcp.shared.exceptions import MCPError  # noqa: PLC0415

    mend = await mend_for(start_mend, inventory)
    async with agent(mend, "legacy") as client:
        for cursor in ("9" * 5000, "next"):
            with pytest.raises(MCPError, match="unknown cursor"):
                await client.list_tools(cursor=cursor)


NODE_CLIENT = Path(__file__).resolve().parents[1] / "mcptools_node"


def node_client_ready() -> str | None:
    """Why the TypeScript SDK's client cannot run, or ``None`` (pinned packages installed once)."""
    return npm_installed(NODE_CLIENT, timeout=300)


@pytest.mark.slow
async def test_typescript_sdk_client_gets_the_same_tools(
    start_mend: StartMend, inventory: Inventory
) -> None:
    """The official TypeScript SDK's client lists the tools and reads a success and a failure."""
    if (why := await asyncio.to_thread(node_client_ready)) is not None:
        pytest.skip(why)
    mend = await mend_for(start_mend, inventory)
    invalid = {"name": "Bad Name", "priority": "urgent", "qty": 2}
    node = await asyncio.create_subprocess_exec(
        "node",
        str(NODE_CLIENT / "client.mjs"),
        str(mend.client.make_url("/mcp")),
        *("get_item", json.dumps({"item_id": 1}), "create_item", json.dumps(invalid)),
        cwd=NODE_CLIENT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        out, err = await node.communicate()
    assert node.returncode == 0, err.decode()[-2000:]
    listed, success, failed = (json.loads(line) for line in out.decode().splitlines())
    assert "create_item" in listed["tools"]
    assert success["structuredContent"] == {"id": 1, "name": "bolts", "priority": "low", "qty": 5}
    assert failed["isError"] is True
    fields = {f["field"] for f in failed["_meta"]["mend/error"]["invalid_fields"]}
    assert fields == {"/name", "/priority"}


async def test_calls_do_not_list_the_tools_again(
    start_mend: StartMend, inventory: Inventory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2026-07-28 calls check their arguments' headers against tools made once, not re-listed."""
    from proxy.edge.mcptools import mcp_server  # noqa: PLC0415

    listed: list[int] = []
    original = mcp_server._RouteServer._list_tools

    async def counted(self: Any, ctx: Any, params: Any) -> Any:
        listed.append(1)
        return await original(self, ctx, params)

    monkeypatch.setattr(mcp_server._RouteServer, "_list_tools", counted)
    mend = await mend_for(start_mend, inventory)
    async with agent(mend, "auto") as client:
        await client.list_tools()
        for _ in range(3):
            assert not (await client.call_tool("get_item", {"item_id": 1})).is_error
    assert len(listed) == 1


#: The headers of an MCP client's POST (a JSON body, either answer form, the protocol's version).
MCP_POST = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "MCP-Protocol-Version": "2025-11-25",
}


async def test_oversized_mcp_request_is_413(start_mend: StartMend, inventory: Inventory) -> None:
    """An MCP request body over 1 MiB is refused with 413, read no further."""
    mend = await mend_for(start_mend, inventory)
    big = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"pad": "x" * (2 << 20)}}
    async with asyncio.timeout(TIMEOUT_S):
        answer = await mend.client.post("/mcp", json=big, headers=MCP_POST)
    assert answer.status == 413


async def test_oversized_chunked_mcp_request_is_413(
    start_mend: StartMend, inventory: Inventory
) -> None:
    """An MCP request body over 1 MiB sent without a length is refused with 413 too."""
    mend = await mend_for(start_mend, inventory)

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"pad": "'
        for _ in range(32):
            yield b"x" * 65536
        yield b'"}}'

    async with asyncio.timeout(TIMEOUT_S):
        answer = await mend.client.post("/mcp", data=chunks(), headers=MCP_POST)
    assert answer.status == 413


async def test_stalled_mcp_request_is_408(start_mend: StartMend, inventory: Inventory) -> None:
    """An MCP request whose body stops arriving is answered 408 after the body timeout."""
    route = {"openapi": inventory.document, "mcp_tools": "/mcp"}
    mend = await start_mend(inventory.url, route=route, client_body_timeout=0.5)
    stalled = asyncio.Event()

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"jsonrpc": "2.0", "id": 1, '
        await stalled.wait()  # never set: the rest never comes

    async with asyncio.timeout(TIMEOUT_S):
        answer = await mend.client.post("/mcp", data=chunks(), headers=MCP_POST)
    assert answer.status == 408


async def test_header_argument_reaches_the_api(
    start_mend: StartMend, start_upstream: StartUpstream, tmp_path: Path
) -> None:
    """A header parameter's argument, non-ASCII included, is the API's request header."""

    async def echo(request: web.Request) -> web.Response:
        return web.json_response({"note": request.headers.get("X-Note")})

    upstream = await start_upstream({"GET /echo": echo})
    document = one_operation("/echo", "echo")
    document["paths"]["/echo"]["get"]["parameters"] = [
        {"name": "X-Note", "in": "header", "required": True, "schema": {"type": "string"}}
    ]
    path = tmp_path / "echo.json"
    path.write_text(json.dumps(document))
    mend = await start_mend(upstream, route={"openapi": path, "mcp_tools": "/mcp"})
    async with agent(mend, "auto") as client:
        result = await client.call_tool("echo", {"X-Note": "café 日本"})
    assert result.structured_content == {"note": "café 日本"}


async def test_a_foreign_host_is_refused(start_mend: StartMend, inventory: Inventory) -> None:
    """mend's own MCP server refuses a DNS-rebinding ``Host`` as a proxied one is (docs/contract.md
    §6):
    403 ``HOST_NOT_ALLOWED``, no session made; ``localhost`` on any port passes."""
    mend = await mend_for(start_mend, inventory)
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    accept = {"Accept": "application/json, text/event-stream"}
    resp = await mend.client.post("/mcp", json=body, headers={**accept, "Host": "evil.example"})
    assert resp.status == 403
    assert (await resp.json())["error"]["code"] == "HOST_NOT_ALLOWED"
    assert "mcp-session-id" not in resp.headers
    resp = await mend.client.post("/mcp", json=body, headers={**accept, "Host": "localhost:1"})
    assert resp.status != 403
