"""Retry advice for an MCP ``tools/call`` that may have been applied follows the tool's
annotations (``tools/list``), with the official SDK 2.x on both ends.

The server is a real ``MCPServer`` app under uvicorn (stateless; JSON or SSE answers) behind a
small ASGI layer that never answers a ``tools/call`` (the tool hangs as far as anyone can tell);
the client is a real ``Client`` through mend, in the SDK's ``auto`` mode (``server/discover``:
revision 2026-07-28) and its ``legacy`` mode (the ``initialize`` handshake), as
``tests/policy/protocols/test_mcp.py`` runs it. A hung call is the tool's failure: an
``isError`` result whose text is the plan, its envelope in ``_meta["mend/error"]``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

from tests.conftest import Mend, StartMend
from tests.mcp_servers import asgi_server, read_whole
from tests.policy.protocols.test_mcp import ANSWER_IDS, ANSWERS, MODES, session, through

ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]
#: seconds mend waits for the hung tools/call
READ_TIMEOUT = 0.5


def orders_app(*, json_response: bool, tool_s: float = 0) -> ASGIApp:
    """An order desk: a tool of each kind MCP's annotations describe, as a stateless ASGI app;
    each tool takes ``tool_s`` seconds, after a progress notification when the call asked for
    progress (none otherwise)."""
    server = MCPServer("orders")

    async def work(ctx: Context[Any, Any]) -> None:
        await ctx.report_progress(0, 1, "started")  # a no-op without a progressToken
        await asyncio.sleep(tool_s)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def find_order(order_id: str, ctx: Context[Any, Any]) -> str:
        """Read an order."""
        await work(ctx)
        return order_id

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True))
    async def set_status(order_id: str, status: str, ctx: Context[Any, Any]) -> str:
        """Set an order's status (the same call twice leaves the same status)."""
        await work(ctx)
        return status

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, idempotent_hint=False, destructive_hint=False
        )
    )
    async def create_order(sku: str, ctx: Context[Any, Any]) -> str:
        """Create an order (each call creates another)."""
        await work(ctx)
        return sku

    @server.tool()
    async def cancel_all(ctx: Context[Any, Any]) -> str:
        """No annotations: MCP's defaults, not read-only, destructive, not idempotent."""
        await work(ctx)
        return "cancelled"

    app: ASGIApp = server.streamable_http_app(json_response=json_response, stateless_http=True)
    return app


def hang_on_calls(app: ASGIApp) -> ASGIApp:
    """Every ``tools/call`` is read whole and never answered; anything else reaches ``app``."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        body, receive_again = await read_whole(receive)
        if json.loads(body).get("method") == "tools/call":
            await asyncio.sleep(30)  # mend gives up long before; uvicorn cancels this at exit
            return
        await app(scope, receive_again, send)

    return wrapped


@asynccontextmanager
async def serving(app: ASGIApp, *, hang: bool = True) -> AsyncIterator[str]:
    """``app`` under uvicorn on a free loopback port (``hang``: behind ``hang_on_calls``); its
    base URL; stopped after (a hung call is cancelled after a second's grace)."""
    async with asgi_server(hang_on_calls(app) if hang else app, grace_s=1) as url:
        yield url


@asynccontextmanager
async def connected(mend: Mend, mode: str) -> AsyncIterator[Client]:
    """A connected SDK client on mend's ``/mcp``, negotiated in ``mode``."""
    async with session(through(mend), mode) as client:
        yield client


async def _envelope(
    client: Client, tool: str, arguments: dict[str, Any], *, progress: bool = False
) -> dict[str, Any]:
    """The envelope mend answered a hung ``tools/call`` with (the ``isError`` result's);
    ``progress``: the call asks for progress notifications."""

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        pass

    async with asyncio.timeout(10):
        result = await client.call_tool(
            tool, arguments, progress_callback=on_progress if progress else None
        )
    assert result.is_error is True
    data = (result.meta or {})["mend/error"]
    assert isinstance(data, dict), repr(result)
    assert data["hint"] in result.content[0].text  # type: ignore[union-attr]
    return data


_CALLS: dict[str, dict[str, Any]] = {
    "find_order": {"order_id": "o-7"},
    "set_status": {"order_id": "o-7", "status": "paid"},
    "create_order": {"sku": "SKU-1"},
    "cancel_all": {},
}


async def _after_listing(
    start_mend: StartMend, tool: str, mode: str, *, json_response: bool, **route: Any
) -> dict[str, Any]:
    async with serving(orders_app(json_response=json_response)) as upstream:
        mend = await start_mend(upstream, route={"read_timeout": READ_TIMEOUT, **route})
        async with connected(mend, mode) as client:
            listed = await client.list_tools()
            assert {t.name for t in listed.tools} == set(_CALLS)
            return await _envelope(client, tool, _CALLS[tool])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("json_response", ANSWERS, ids=ANSWER_IDS)
@pytest.mark.parametrize("tool", ["find_order", "set_status"])
async def test_read_only_or_idempotent_tool_is_retryable(
    start_mend: StartMend, tool: str, json_response: bool, mode: str
) -> None:
    """A hung call of a tool listed read-only or idempotent: applied unknown, retry."""
    error = await _after_listing(start_mend, tool, mode, json_response=json_response)
    assert error["code"] == "UPSTREAM_TIMEOUT"
    assert (error["applied"], error["retryable"], error["action"]) == ("unknown", True, "retry")
    assert error["retry_after_ms"] is not None


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("json_response", ANSWERS, ids=ANSWER_IDS)
async def test_additive_tool_is_checked_first(
    start_mend: StartMend, json_response: bool, mode: str
) -> None:
    """A hung call of a non-idempotent, non-destructive tool: not retryable, check first."""
    error = await _after_listing(start_mend, "create_order", mode, json_response=json_response)
    assert (error["applied"], error["retryable"], error["action"]) == ("unknown", False, "escalate")
    assert "may already have taken effect" in error["hint"]
    assert "call a tool that reads what it creates or changes" in error["hint"]
    assert "ask the user before" not in error["hint"].lower()


@pytest.mark.parametrize("mode", MODES)
async def test_unannotated_tool_asks_the_user(start_mend: StartMend, mode: str) -> None:
    """A hung call of a tool without annotations (MCP: destructive): the plan asks the user."""
    error = await _after_listing(start_mend, "cancel_all", mode, json_response=True)
    assert (error["retryable"], error["action"]) == (False, "escalate")
    assert "ask the user before calling it again" in error["hint"]


@pytest.mark.parametrize("mode", MODES)
async def test_unlisted_tool_is_judged_as_a_post(start_mend: StartMend, mode: str) -> None:
    """Without a tools/list seen, even a read-only tool's hung call is a POST: not retryable."""
    async with serving(orders_app(json_response=True)) as upstream:
        mend = await start_mend(upstream, route={"read_timeout": READ_TIMEOUT})
        async with connected(mend, mode) as client:
            error = await _envelope(client, "find_order", _CALLS["find_order"])
    assert (error["applied"], error["retryable"]) == ("unknown", False)


@pytest.mark.parametrize("mode", MODES)
async def test_route_override_wins_over_annotations(start_mend: StartMend, mode: str) -> None:
    """A route's retry_safe entry for a tool glob overrides what tools/list said, both ways."""
    overrides = [{"tool": "create_*", "safe": True}, {"tool": "find_order", "safe": False}]
    created = await _after_listing(
        start_mend, "create_order", mode, json_response=True, retry_safe=overrides
    )
    found = await _after_listing(
        start_mend, "find_order", mode, json_response=True, retry_safe=overrides
    )
    assert (created["retryable"], created["action"]) == (True, "retry")
    assert (found["retryable"], found["action"]) == (False, "escalate")


@pytest.mark.parametrize(
    ("mode", "progress"),
    [("legacy", False), ("legacy", True), ("auto", True)],
    ids=["legacy-silent", "legacy-progress", "auto-progress"],
)
@pytest.mark.parametrize(("tool", "retryable"), [("find_order", True), ("create_order", False)])
async def test_tool_hung_inside_an_event_stream_is_answered_in_it(
    start_mend: StartMend, tool: str, retryable: bool, mode: str, progress: bool
) -> None:
    """An SSE answer whose tool never finishes (silent, or after a progress notification):
    at idle_timeout mend ends the stream with an event answering the call (UPSTREAM_TIMEOUT,
    applied unknown), not an abort the SDK client would wait on forever; the advice follows
    the tool's annotations.

    On revision 2026-07-28 (auto mode) the SDK 2.x server sends no response headers for a
    silent handler until its 15 s keepalive: its answer only becomes an event stream at once
    with a notification, so that revision is run with progress."""
    app = orders_app(json_response=False, tool_s=30)
    async with serving(app, hang=False) as upstream:
        mend = await start_mend(upstream, route={"idle_timeout": 1})
        async with connected(mend, mode) as client:
            await client.list_tools()
            error = await _envelope(client, tool, _CALLS[tool], progress=progress)
    assert error["code"] == "UPSTREAM_TIMEOUT"
    assert (error["applied"], error["retryable"]) == ("unknown", retryable)
