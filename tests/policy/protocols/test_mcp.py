"""MCP through mend with the official Python SDK 2.x on both ends (streamable HTTP, JSON and SSE).

The server is a real ``MCPServer`` app under uvicorn, the client a real ``Client`` in the SDK's
``auto`` mode (``server/discover``: revision 2026-07-28) and its ``legacy`` mode (the
``initialize`` handshake); mend sits between them on loopback. Every answer must parse in the SDK
client; an error must reach the model as a recovery plan; nothing planted in the server's errors
may reach the client.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError

from tests.conftest import Mend, StartMend
from tests.mcp_servers import asgi_server, read_whole, sdk1_server, sdk1_site
from tests.runtime.test_app import free_port

SECRET = "postgres://admin:Pl4ntedSecret@db.internal:5432/issues"
MARKER = "PLANTED_MARKER_7f3a"
TRACE = (
    "Traceback (most recent call last):\n"
    '  File "/srv/issues/tools.py", line 42, in create_issue\n'
    f"    raise RuntimeError({MARKER!r})\n"
)
LEAKS = (SECRET, "Pl4ntedSecret", MARKER, "/srv/issues", "Traceback")
PROGRESS_STEPS = 30
PROGRESS_GAP_S = 0.03

ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]


MODES = ("auto", "legacy")


def mcp_server() -> MCPServer:
    """An issue tracker's MCP server: one tool per way a tool fails."""
    server = MCPServer("issues")

    @server.tool()
    def create_issue(title: str, priority: int) -> str:
        """Create an issue."""
        if title == "explode":
            raise RuntimeError(f"insert failed on {SECRET}\n{TRACE}")
        return f"created {title} with priority {priority}"

    @server.tool()
    def crash() -> str:
        """Answered with an HTTP 500 by the middleware below."""
        return "never"

    @server.tool()
    async def import_issues(count: int, ctx: Context[Any, Any]) -> str:
        """Report progress ``count`` times, ``PROGRESS_GAP_S`` apart."""
        for step in range(count):
            await ctx.report_progress(step + 1, count, f"issue {step + 1}")
            await asyncio.sleep(PROGRESS_GAP_S)
        return f"imported {count}"

    return server


def failing_crash(app: ASGIApp) -> ASGIApp:
    """``tools/call crash`` answered with HTTP 500 and a JSON-RPC error holding a trace, as a
    server whose framework failed outside the tool answers."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        body, receive_again = await read_whole(receive)
        call = json.loads(body)
        if call.get("method") == "tools/call" and call["params"]["name"] == "crash":
            error = {"code": -32603, "message": f"Internal error: {SECRET}\n{TRACE}"}
            payload = json.dumps({"jsonrpc": "2.0", "id": call["id"], "error": error}).encode()
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 500, "headers": headers})
            await send({"type": "http.response.body", "body": payload})
            return
        await app(scope, receive_again, send)

    return wrapped


@asynccontextmanager
async def serving(
    server: MCPServer, *, json_response: bool, stateless: bool = False
) -> AsyncIterator[str]:
    """``server`` under uvicorn on a free loopback port; its base URL; stopped after."""
    app = server.streamable_http_app(json_response=json_response, stateless_http=stateless)
    async with asgi_server(failing_crash(app)) as url:
        yield url


@asynccontextmanager
async def session(url: str, mode: str = "auto") -> AsyncIterator[Client]:
    """A connected SDK client on ``url`` (the server's ``/mcp``), negotiated in ``mode``."""
    async with asyncio.timeout(30), Client(url, mode=mode) as client:
        yield client


def through(mend: Mend) -> str:
    return str(mend.client.make_url("/mcp"))


def no_leak(value: Any) -> None:
    text = json.dumps(value, default=str)
    for leaked in LEAKS:
        assert leaked not in text, leaked


ANSWERS = [True, False]
ANSWER_IDS = ["json", "sse"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("json_response", ANSWERS, ids=ANSWER_IDS)
async def test_a_tool_exception_reaches_the_model_as_a_recovery_plan(
    start_mend: StartMend, json_response: bool, mode: str
) -> None:
    """A tool raising with a stack trace and a secret: still a result with isError, its text
    the recovery plan, the envelope in _meta["mend/error"], nothing planted in it."""
    async with serving(mcp_server(), json_response=json_response) as upstream:
        mend = await start_mend(upstream)
        async with session(through(mend), mode) as client:
            result = await client.call_tool("create_issue", {"title": "explode", "priority": 1})
    assert result.is_error is True
    text = result.content[0].text  # type: ignore[union-attr]
    assert text.startswith("Error ")
    assert "Action required:\n1. " in text
    assert result.meta is not None
    envelope = result.meta["mend/error"]
    assert text.rstrip().endswith(json.dumps({"error": envelope}, separators=(",", ":")))
    no_leak(result.model_dump())


async def _tool_error(url: str, mode: str) -> tuple[str, dict[str, Any]]:
    async with session(url, mode) as client:
        result = await client.call_tool("create_issue", {"title": "explode", "priority": 1})
        return client.protocol_version, result.model_dump(by_alias=True, exclude_none=True)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("json_response", ANSWERS, ids=ANSWER_IDS)
async def test_a_rewritten_tool_error_keeps_every_member_the_server_sent(
    start_mend: StartMend, json_response: bool, mode: str
) -> None:
    """The rewritten isError result keeps resultType and every _meta key the server sent (its
    serverInfo on 2026-07-28): only content changes and mend/error is added."""
    async with serving(mcp_server(), json_response=json_response) as upstream:
        mend = await start_mend(upstream)
        version, direct = await _tool_error(f"{upstream}/mcp", mode)
        proxied_version, proxied = await _tool_error(through(mend), mode)
    assert proxied_version == version
    assert version == ("2026-07-28" if mode == "auto" else "2025-11-25")
    assert set(proxied) == set(direct) | ({"_meta"} if "_meta" not in direct else set())
    for key in set(direct) - {"content", "_meta"}:
        assert proxied[key] == direct[key], key
    assert {**direct.get("_meta", {}), "mend/error": proxied["_meta"]["mend/error"]} == proxied[
        "_meta"
    ]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("json_response", ANSWERS, ids=ANSWER_IDS)
async def test_a_validation_error_names_the_argument_to_fix(
    start_mend: StartMend, json_response: bool, mode: str
) -> None:
    """The SDK's pydantic text for bad arguments becomes VALIDATION_FAILED on /priority, with
    the value sent and the plan to call the tool again."""
    async with serving(mcp_server(), json_response=json_response) as upstream:
        mend = await start_mend(upstream)
        async with session(through(mend), mode) as client:
            result = await client.call_tool("create_issue", {"title": "t", "priority": "high"})
    assert result.is_error is True
    envelope = result.meta["mend/error"]  # type: ignore[index]
    assert envelope["code"] == "VALIDATION_FAILED"
    assert envelope["field"] == "/priority"
    assert envelope["invalid_fields"][0]["received"] == "high"
    text = result.content[0].text  # type: ignore[union-attr]
    assert "Send the create_issue tool call again." in text


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("json_response", ANSWERS, ids=ANSWER_IDS)
async def test_a_jsonrpc_error_answering_a_tool_call_reaches_the_model_as_a_result(
    start_mend: StartMend, json_response: bool, mode: str
) -> None:
    """An HTTP 500 carrying a JSON-RPC error for ``tools/call`` (the SDK client raises it;
    openai-agents, llama-index and langchain-mcp-adapters hand the model no word of it) is an
    ``isError`` result: the plan as its text, the envelope in ``_meta``, nothing planted."""
    async with serving(mcp_server(), json_response=json_response) as upstream:
        mend = await start_mend(upstream)
        async with session(through(mend), mode) as client:
            result = await client.call_tool("crash", {})
            after = await client.call_tool("create_issue", {"title": "ok", "priority": 2})
    assert result.is_error is True
    envelope = (result.meta or {})["mend/error"]
    assert envelope["upstream_status"] == 500
    text = result.content[0].text  # type: ignore[union-attr]
    assert envelope["hint"] in text
    assert "crash" in text  # the tool, not the transport's POST /mcp
    no_leak(result.model_dump())
    assert after.is_error is False  # the session goes on


@pytest.mark.parametrize("json_response", ANSWERS, ids=ANSWER_IDS)
async def test_a_route_can_keep_a_tool_calls_jsonrpc_error_an_error(
    start_mend: StartMend, json_response: bool
) -> None:
    """``tool_errors: error``: the same failure stays the JSON-RPC error the client raises as
    MCPError, with the upstream's code and the plan in its message."""
    async with serving(mcp_server(), json_response=json_response) as upstream:
        mend = await start_mend(upstream, route={"tool_errors": "error"})
        async with session(through(mend)) as client:
            with pytest.raises(MCPError) as raised:
                await client.call_tool("crash", {})
    error = raised.value.error
    data = dict(error.data or {})
    assert error.code == -32603
    assert data["upstream_status"] == 500
    assert data["hint"] in error.message
    no_leak(error.model_dump())


@pytest.mark.parametrize("mode", MODES)
async def test_a_dead_upstream_is_an_mcp_error_the_client_parses(
    start_mend: StartMend, mode: str
) -> None:
    """With nothing listening, connecting fails with UPSTREAM_UNREACHABLE as a JSON-RPC error
    carrying the request's id, not an envelope the SDK cannot read."""
    mend = await start_mend(f"http://127.0.0.1:{free_port()}")
    raised: list[MCPError] = []
    try:
        async with session(through(mend), mode):
            pass
    except* MCPError as group:  # the SDK may raise it inside its transport's task group
        raised.extend(_leaves(group))
    assert len(raised) == 1
    error = raised[0].error
    data = dict(error.data or {})
    assert data["code"] == "UPSTREAM_UNREACHABLE"
    assert data["retryable"] is True
    assert error.code == -32603


def _leaves(group: BaseExceptionGroup[MCPError]) -> list[MCPError]:
    out: list[MCPError] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


async def _progress_arrivals(url: str) -> list[float]:
    arrivals: list[float] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        arrivals.append(time.monotonic())

    async with session(url) as client:
        result = await client.call_tool(
            "import_issues", {"count": PROGRESS_STEPS}, progress_callback=progress
        )
    assert result.is_error is False
    return arrivals


async def test_progress_notifications_stream_through_with_their_spacing(
    start_mend: StartMend,
) -> None:
    """30 progress notifications on an SSE answer arrive one by one through mend, spread over
    the time the tool takes to send them, never held for the final result (only lower bounds:
    a loaded machine can slow them, but nothing can make a held burst look spread)."""
    async with serving(mcp_server(), json_response=False) as upstream:
        mend = await start_mend(upstream)
        direct = await _progress_arrivals(f"{upstream}/mcp")
        proxied = await _progress_arrivals(through(mend))
    assert len(direct) == len(proxied) == PROGRESS_STEPS
    assert proxied[-1] - proxied[0] > 0.5 * PROGRESS_STEPS * PROGRESS_GAP_S
    gaps = [b - a for a, b in itertools.pairwise(proxied)]
    assert sorted(gaps)[len(gaps) // 2] > PROGRESS_GAP_S * 0.5  # not delivered in one burst


def handshake_server(seen: asyncio.Event) -> MCPServer:
    """A tool that reports progress, then waits (10 s at most) until the client has seen it."""
    server = MCPServer("handshake")

    @server.tool()
    async def wait_for_ack(ctx: Context[Any, Any]) -> str:
        """Report progress once, then finish only when the client says it arrived."""
        await ctx.report_progress(1, 2, "halfway")
        try:
            await asyncio.wait_for(seen.wait(), 10)
        except TimeoutError:
            return "the progress notification was held"
        return "the client saw the progress as it was sent"

    return server


async def _handshake(url: str, seen: asyncio.Event) -> tuple[str, list[str | None]]:
    messages: list[str | None] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message)
        seen.set()

    async with session(url) as client:
        result = await client.call_tool("wait_for_ack", {}, progress_callback=progress)
    seen.clear()
    first = result.content[0]
    assert first.type == "text"
    return first.text, messages


async def test_progress_reaches_the_client_before_the_result_on_a_success_rules_route(
    start_mend: StartMend,
) -> None:
    """On a route with ``success_rules: [jsonrpc.*]`` (every 2xx read by rules) a tool's
    progress notification still reaches the client while the tool runs, as it does direct: the
    tool finishes only once the client has seen it, so a held stream would time the tool out."""
    seen = asyncio.Event()
    async with serving(handshake_server(seen), json_response=False) as upstream:
        mend = await start_mend(upstream, route={"success_rules": ("jsonrpc.*",)})
        direct = await _handshake(f"{upstream}/mcp", seen)
        proxied = await _handshake(through(mend), seen)
    assert direct == proxied == ("the client saw the progress as it was sent", ["halfway"])


@pytest.mark.parametrize("json_response", ANSWERS, ids=ANSWER_IDS)
async def test_a_successful_call_is_byte_for_byte_what_the_server_sent(
    start_mend: StartMend, json_response: bool
) -> None:
    """A plain successful tools/call (stateless server) is the same bytes direct and through
    mend."""
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "create_issue", "arguments": {"title": "t", "priority": 3}},
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }
    async with serving(mcp_server(), json_response=json_response, stateless=True) as upstream:
        mend = await start_mend(upstream)
        async with httpx.AsyncClient() as client:
            direct = await client.post(f"{upstream}/mcp", json=call, headers=headers)
            proxied = await client.post(through(mend), json=call, headers=headers)
    assert direct.status_code == proxied.status_code == 200
    assert proxied.content == direct.content
    assert b"created t with priority 3" in proxied.content
    assert "X-Error-Code" not in proxied.headers


@pytest.fixture(scope="session")
def sdk1() -> Path:
    """The MCP SDK 1.x, installed once beside the virtualenv (tests/mcp_servers.py)."""
    return sdk1_site()


async def _connect_and_fail(url: str, mode: str) -> tuple[str, dict[str, Any]]:
    """The revision agreed, and a failing tool call's result."""
    async with session(url, mode) as client:
        result = await client.call_tool("create_issue", {"title": "explode", "priority": 1})
        return client.protocol_version, result.model_dump(by_alias=True)


DISCOVER = {"jsonrpc": "2.0", "id": 7, "method": "server/discover", "params": {}}


async def _discover(url: str) -> tuple[int, Any, int]:
    """A bare ``server/discover`` probe: the HTTP status, the answer's id, its error code."""
    headers = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(timeout=10) as client:
        answer = await client.post(url, json=DISCOVER, headers=headers)
    text = answer.text
    body = json.loads(text[text.index("{") :] if "data:" in text else text)
    return answer.status_code, body.get("id"), body["error"]["code"]


async def _succeed(url: str, mode: str) -> dict[str, Any]:
    async with session(url, mode) as client:
        result = await client.call_tool("create_issue", {"title": "t", "priority": 2})
        return result.model_dump(by_alias=True)


@pytest.mark.parametrize("json_response", ANSWERS, ids=ANSWER_IDS)
async def test_an_sdk1_servers_discover_refusal_keeps_its_status_and_id(
    start_mend: StartMend, sdk1: Path, json_response: bool
) -> None:
    """An SDK 1.x server answers 2.x's ``server/discover`` probe with a 400 JSON-RPC error:
    through mend it is the same 400 with the same code, answered to the request's own id (1.x
    answers a stand-in ``"server-error"``), so the client falls back to ``initialize`` at once
    (issue 24: a 200 with the stand-in id made the SDK wait 10 s for an answer)."""
    async with sdk1_server(sdk1, json_response=json_response) as upstream:
        mend = await start_mend(upstream)
        direct = await _discover(f"{upstream}/mcp")
        proxied = await _discover(through(mend))
    assert direct[0] == proxied[0] == 400
    assert direct[2] == proxied[2] == -32600
    assert proxied[1] == DISCOVER["id"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("json_response", ANSWERS, ids=ANSWER_IDS)
async def test_an_sdk1_server_agrees_a_revision_and_fails_a_tool_as_a_result(
    start_mend: StartMend, sdk1: Path, json_response: bool, mode: str
) -> None:
    """An SDK 2.x client on an SDK 1.x server: through mend it agrees the same revision as
    direct, and a tool's failure arrives as an isError result carrying the plan."""
    async with sdk1_server(sdk1, json_response=json_response) as upstream:
        mend = await start_mend(upstream)
        version, direct = await _connect_and_fail(f"{upstream}/mcp", mode)
        proxied_version, proxied = await _connect_and_fail(through(mend), mode)
    assert proxied_version == version == "2025-11-25"
    assert direct["isError"] is proxied["isError"] is True
    assert proxied["_meta"]["mend/error"]["code"] == "TOOL_FAILED"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("json_response", ANSWERS, ids=ANSWER_IDS)
async def test_an_sdk1_server_success_is_what_it_answers_direct(
    start_mend: StartMend, sdk1: Path, json_response: bool, mode: str
) -> None:
    """A successful tool call on an SDK 1.x server is the same result through mend as direct."""
    async with sdk1_server(sdk1, json_response=json_response) as upstream:
        mend = await start_mend(upstream)
        direct = await _succeed(f"{upstream}/mcp", mode)
        proxied = await _succeed(through(mend), mode)
    assert proxied == direct
    assert direct["isError"] is False


@pytest.mark.parametrize("mode", MODES)
async def test_the_demo_mcp_tool_works_with_the_sdk_client(
    aiohttp_server: Any, start_mend: StartMend, mode: str
) -> None:
    """The demo's hand-written MCP tool (demo/legacy_api.py) behind mend: the SDK 2.x client
    connects in either mode (auto falls back from server/discover's -32601), and a priority
    out of range comes back as an isError result pointing at /priority."""
    from demo.legacy_api import create_legacy_app  # noqa: PLC0415

    mend = await start_mend(await aiohttp_server(create_legacy_app()))
    async with session(through(mend), mode) as client:
        result = await client.call_tool("create_ticket", {"title": "t", "priority": 9})
    assert result.is_error is True
    envelope = result.meta["mend/error"]  # type: ignore[index]
    assert (envelope["code"], envelope["field"]) == ("VALIDATION_FAILED", "/priority")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("json_response", ANSWERS, ids=ANSWER_IDS)
async def test_an_sdk2_server_success_is_what_it_answers_direct(
    start_mend: StartMend, json_response: bool, mode: str
) -> None:
    """A successful tool call on an SDK 2.x server (2026-07-28 in auto mode) is the same
    result through mend as direct, every member included."""
    async with serving(mcp_server(), json_response=json_response) as upstream:
        mend = await start_mend(upstream)
        direct = await _succeed(f"{upstream}/mcp", mode)
        proxied = await _succeed(through(mend), mode)
    assert proxied == direct
    assert direct["isError"] is False
