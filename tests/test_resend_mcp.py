"""Retry advice for an MCP ``tools/call`` that may have been applied follows the tool's
annotations (``tools/list``), with the official SDK on both ends.

The server is a real SDK app (FastMCP; MCPServer in SDK 2) under uvicorn (JSON or SSE answers)
behind a small ASGI layer that never answers a ``tools/call`` (the tool hangs as far as anyone
can tell); the client is a real ``ClientSession`` through mend. Only SDK surfaces common to its
1.x and 2.x releases are used: the server class is found under either name, its HTTP settings go
where its release takes them, annotations are given by their wire names, and an error's data is
read from either shape.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import pytest
import uvicorn
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ToolAnnotations

if TYPE_CHECKING:  # the SDK the dev extras pin
    from mcp.server.fastmcp import FastMCP as Server
else:
    try:  # SDK 2.x
        from mcp.server.mcpserver import MCPServer as Server
    except ImportError:  # SDK 1.x
        from mcp.server.fastmcp import FastMCP as Server

from tests.conftest import Mend, StartMend

ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]
#: seconds mend waits for the hung tools/call
READ_TIMEOUT = 0.5


def _annotations(**hints: bool) -> ToolAnnotations:
    return ToolAnnotations.model_validate(hints)  # wire names: the fields' names or aliases


def orders_app(*, json_response: bool, tool_s: float = 0) -> ASGIApp:
    """An order desk: a tool of each kind MCP's annotations describe, as an ASGI app; each
    tool takes ``tool_s`` seconds."""
    http: dict[str, Any] = {"json_response": json_response, "stateless_http": True}
    # SDK 1 takes the HTTP settings in the constructor, SDK 2 in streamable_http_app()
    on_app = "json_response" in inspect.signature(Server.streamable_http_app).parameters
    server = Server("orders") if on_app else Server("orders", **http)

    @server.tool(annotations=_annotations(readOnlyHint=True))
    async def find_order(order_id: str) -> str:
        """Read an order."""
        await asyncio.sleep(tool_s)
        return order_id

    @server.tool(annotations=_annotations(readOnlyHint=False, idempotentHint=True))
    async def set_status(order_id: str, status: str) -> str:
        """Set an order's status (the same call twice leaves the same status)."""
        await asyncio.sleep(tool_s)
        return status

    @server.tool(
        annotations=_annotations(readOnlyHint=False, idempotentHint=False, destructiveHint=False)
    )
    async def create_order(sku: str) -> str:
        """Create an order (each call creates another)."""
        await asyncio.sleep(tool_s)
        return sku

    @server.tool()
    async def cancel_all() -> str:
        """No annotations: MCP's defaults, not read-only, destructive, not idempotent."""
        await asyncio.sleep(tool_s)
        return "cancelled"

    app: ASGIApp = server.streamable_http_app(**http) if on_app else server.streamable_http_app()
    return app


def hang_on_calls(app: ASGIApp) -> ASGIApp:
    """Every ``tools/call`` is read whole and never answered; anything else reaches ``app``."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        messages, body, more = [], b"", True
        while more:
            message = await receive()
            messages.append(message)
            body += message.get("body", b"")
            more = message.get("more_body", False)
        if json.loads(body).get("method") == "tools/call":
            await asyncio.sleep(30)  # mend gives up long before; uvicorn cancels this at exit
            return
        replay = iter(messages)

        async def receive_again() -> Any:
            try:
                return next(replay)
            except StopIteration:
                return await receive()

        await app(scope, receive_again, send)

    return wrapped


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def serving(app: ASGIApp, *, hang: bool = True) -> AsyncIterator[str]:
    """``app`` under uvicorn on a free loopback port (``hang``: behind ``hang_on_calls``); its
    base URL; stopped after."""
    port = _free_port()
    config = uvicorn.Config(
        hang_on_calls(app) if hang else app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=1,
    )
    runner = uvicorn.Server(config)
    task = asyncio.create_task(runner.serve())
    async with asyncio.timeout(10):
        while not runner.started:  # noqa: ASYNC110 (uvicorn offers a flag, not an event)
            await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        runner.should_exit = True
        async with asyncio.timeout(10):
            await task


@asynccontextmanager
async def session(mend: Mend) -> AsyncIterator[ClientSession]:
    """An initialized SDK client session on mend's ``/mcp``."""
    async with (
        streamable_http_client(str(mend.client.make_url("/mcp"))) as (read, write, _),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        yield client


async def _envelope(client: ClientSession, tool: str, arguments: dict[str, Any]) -> Any:
    """The envelope mend answered a hung ``tools/call`` with (a JSON-RPC error's ``data``)."""
    # the SDK raises McpError (its module differs between majors): any exception, its data read
    with pytest.raises(Exception) as raised:  # noqa: PT011
        async with asyncio.timeout(10):
            await client.call_tool(tool, arguments)
    error = raised.value
    data = getattr(error, "data", None) or getattr(getattr(error, "error", None), "data", None)
    assert isinstance(data, dict), repr(raised.value)
    return data


_CALLS: dict[str, dict[str, Any]] = {
    "find_order": {"order_id": "o-7"},
    "set_status": {"order_id": "o-7", "status": "paid"},
    "create_order": {"sku": "SKU-1"},
    "cancel_all": {},
}


async def _after_listing(
    start_mend: StartMend, tool: str, *, json_response: bool, **route: Any
) -> Any:
    async with serving(orders_app(json_response=json_response)) as upstream:
        mend = await start_mend(upstream, route={"read_timeout": READ_TIMEOUT, **route})
        async with session(mend) as client:
            listed = await client.list_tools()
            assert {t.name for t in listed.tools} == set(_CALLS)
            return await _envelope(client, tool, _CALLS[tool])


@pytest.mark.parametrize("json_response", [True, False], ids=["json", "sse"])
@pytest.mark.parametrize("tool", ["find_order", "set_status"])
async def test_read_only_or_idempotent_tool_is_retryable(
    start_mend: StartMend, tool: str, json_response: bool
) -> None:
    """A hung call of a tool listed read-only or idempotent: applied unknown, retry."""
    error = await _after_listing(start_mend, tool, json_response=json_response)
    assert error["code"] == "UPSTREAM_TIMEOUT"
    assert (error["applied"], error["retryable"], error["action"]) == ("unknown", True, "retry")
    assert error["retry_after_ms"] is not None


@pytest.mark.parametrize("json_response", [True, False], ids=["json", "sse"])
async def test_additive_tool_is_checked_first(start_mend: StartMend, json_response: bool) -> None:
    """A hung call of a non-idempotent, non-destructive tool: not retryable, check first."""
    error = await _after_listing(start_mend, "create_order", json_response=json_response)
    assert (error["applied"], error["retryable"], error["action"]) == ("unknown", False, "escalate")
    assert "may already have taken effect" in error["hint"]
    assert "call a tool that reads what it creates or changes" in error["hint"]
    assert "ask the user before" not in error["hint"].lower()


async def test_unannotated_tool_asks_the_user(start_mend: StartMend) -> None:
    """A hung call of a tool without annotations (MCP: destructive): the plan asks the user."""
    error = await _after_listing(start_mend, "cancel_all", json_response=True)
    assert (error["retryable"], error["action"]) == (False, "escalate")
    assert "ask the user before calling it again" in error["hint"]


async def test_unlisted_tool_is_judged_as_a_post(start_mend: StartMend) -> None:
    """Without a tools/list seen, even a read-only tool's hung call is a POST: not retryable."""
    async with serving(orders_app(json_response=True)) as upstream:
        mend = await start_mend(upstream, route={"read_timeout": READ_TIMEOUT})
        async with session(mend) as client:
            error = await _envelope(client, "find_order", _CALLS["find_order"])
    assert (error["applied"], error["retryable"]) == ("unknown", False)


async def test_route_override_wins_over_annotations(start_mend: StartMend) -> None:
    """A route's retry_safe entry for a tool glob overrides what tools/list said, both ways."""
    overrides = [{"tool": "create_*", "safe": True}, {"tool": "find_order", "safe": False}]
    created = await _after_listing(
        start_mend, "create_order", json_response=True, retry_safe=overrides
    )
    found = await _after_listing(start_mend, "find_order", json_response=True, retry_safe=overrides)
    assert (created["retryable"], created["action"]) == (True, "retry")
    assert (found["retryable"], found["action"]) == (False, "escalate")


@pytest.mark.parametrize(("tool", "retryable"), [("find_order", True), ("create_order", False)])
async def test_tool_hung_inside_an_event_stream_is_answered_in_it(
    start_mend: StartMend, tool: str, retryable: bool
) -> None:
    """An SSE answer whose tool never finishes: at idle_timeout mend ends the stream with an
    event answering the call (UPSTREAM_TIMEOUT, applied unknown), not an abort the SDK
    client would wait on forever; the advice follows the tool's annotations."""
    app = orders_app(json_response=False, tool_s=30)
    async with serving(app, hang=False) as upstream:
        mend = await start_mend(upstream, route={"idle_timeout": 1})
        async with session(mend) as client:
            await client.list_tools()
            error = await _envelope(client, tool, _CALLS[tool])
    assert error["code"] == "UPSTREAM_TIMEOUT"
    assert (error["applied"], error["retryable"]) == ("unknown", retryable)
