"""The reference MCP servers from PyPI (time, git, fetch) behind mend, failing their own way.

Each server is the package's own ``create_server()`` (the ``MCPServer`` its stdio entry point
runs) served over streamable HTTP; the client is the SDK 2.x ``Client`` in ``auto`` mode. Every
failure is made for real: an unknown time zone, a revision that does not exist, a directory that
is not a repository, a commit with nothing staged, a fetch of a port nothing listens on, a fetch
of a page that answers 500. Each must reach the model as an ``isError`` result whose plan is
specific (a pointer into the arguments, a wait, or the tool to call first), with what the model
itself sent still readable; direct, the same call is an ``isError`` result too.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import git
import pytest
from aiohttp import web
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_server_fetch.server import create_server as fetch_server
from mcp_server_git.server import create_server as git_server
from mcp_server_time.server import create_server as time_server

from tests.conftest import StartMend, StartUpstream
from tests.mcp_servers import asgi_server
from tests.runtime.test_app import free_port


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with one commit and nothing staged."""
    path = tmp_path / "repo"
    made = git.Repo.init(path)
    with made.config_writer() as config:
        config.set_value("user", "name", "mend")
        config.set_value("user", "email", "mend@example.com")
    (path / "README").write_text("hello\n")
    made.index.add(["README"])
    made.index.commit("init")
    return path


@asynccontextmanager
async def behind_mend(server: MCPServer, start_mend: StartMend) -> AsyncIterator[tuple[str, str]]:
    """``server`` over streamable HTTP, and mend in front of it: (direct URL, URL through mend)."""
    async with asgi_server(server.streamable_http_app(json_response=True)) as upstream:
        mend = await start_mend(upstream)
        yield f"{upstream}/mcp", str(mend.client.make_url("/mcp"))


async def call(url: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One tools/call on a fresh SDK client (auto mode); the result as the wire carried it."""
    async with Client(url, mode="auto") as client:
        result = await client.call_tool(tool, arguments)
        return result.model_dump(by_alias=True, exclude_none=True)


async def rpc_error(url: str, tool: str) -> MCPError:
    """The JSON-RPC error a tools/call is answered with (the SDK raises it in a task group)."""
    raised: list[BaseException] = []
    try:
        await call(url, tool, {})
    except* MCPError as group:
        raised.append(group)
    assert raised, f"{tool} did not fail"
    found = raised[0]
    while isinstance(found, BaseExceptionGroup):
        found = found.exceptions[0]
    assert isinstance(found, MCPError)
    return found


@dataclass(frozen=True)
class Failure:
    """One way a reference server's tool fails, and the plan mend must give for it."""

    server: Callable[[Path, str], MCPServer]
    tool: str
    arguments: Callable[[Path, str], dict[str, Any]]
    expect: dict[str, Any]
    #: the argument values the model wrote that must be readable in the text it gets back
    readable: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


def _time(_: Path, __: str) -> MCPServer:
    server: MCPServer = time_server("Europe/Paris")
    return server


def _git(_: Path, __: str) -> MCPServer:
    return git_server(None)


def _fetch(_: Path, __: str) -> MCPServer:
    # the tests' network is loopback only: the fetch server must be allowed to reach it
    server: MCPServer = fetch_server(ignore_robots_txt=True, allow_private_ips=True)
    return server


REFUSED = f"http://127.0.0.1:{free_port()}/page"
FAILURES = {
    "time-invalid-zone": Failure(
        _time,
        "get_current_time",
        lambda _, __: {"timezone": "Mars/Olympus"},
        {"code": "VALIDATION_FAILED", "action": "fix_request", "field": "/timezone"},
        ("Mars/Olympus",),
    ),
    "time-bad-format": Failure(
        _time,
        "convert_time",
        lambda _, __: {
            "source_timezone": "Europe/Paris",
            "time": "25:99",
            "target_timezone": "UTC",
        },
        {"code": "VALIDATION_FAILED", "action": "fix_request", "field": "/time"},
    ),
    "git-bad-revision": Failure(
        _git,
        "git_show",
        lambda repo, _: {"repo_path": str(repo), "revision": "nope123"},
        {"code": "RESOURCE_NOT_FOUND", "action": "fix_request", "field": "/revision"},
        ("nope123",),
    ),
    "git-not-a-repository": Failure(
        _git,
        "git_status",
        lambda repo, _: {"repo_path": str(repo.parent)},
        {"code": "VALIDATION_FAILED", "action": "fix_request", "field": "/repo_path"},
    ),
    "git-nothing-staged": Failure(
        _git,
        "git_commit",
        lambda repo, _: {"repo_path": str(repo), "message": "empty"},
        {
            "code": "PRECONDITION_FAILED",
            "action": "call_other_operation",
            "next_operation": "git_add",
        },
    ),
    "fetch-refused": Failure(
        _fetch,
        "fetch",
        lambda _, __: {"url": REFUSED},
        {"code": "DEPENDENCY_UNAVAILABLE", "action": "retry", "retryable": True, "field": "/url"},
        (REFUSED,),
    ),
    "fetch-page-500": Failure(
        _fetch,
        "fetch",
        lambda _, page: {"url": page},
        {"code": "DEPENDENCY_UNAVAILABLE", "action": "retry", "retryable": True},
    ),
}


@pytest.mark.parametrize("case", list(FAILURES), ids=list(FAILURES))
async def test_a_reference_server_failure_gets_a_specific_plan(
    start_mend: StartMend, start_upstream: StartUpstream, repo: Path, case: str
) -> None:
    """The tool's failure stays an isError result (as direct), with a plan naming the argument,
    the wait or the tool to call first, and the model's own values readable in its text."""
    failure = FAILURES[case]

    async def broken(_: web.Request) -> web.Response:
        return web.Response(status=500, text="upstream exploded")

    page = str((await start_upstream({"GET /page": broken})).make_url("/page"))
    arguments = failure.arguments(repo, page)
    if failure.tool == "git_status":
        assert not (repo.parent / ".git").exists()
    async with behind_mend(failure.server(repo, page), start_mend) as (direct_url, mend_url):
        direct = await call(direct_url, failure.tool, arguments)
        proxied = await call(mend_url, failure.tool, arguments)
    assert direct["isError"] is proxied["isError"] is True
    envelope = proxied["_meta"]["mend/error"]
    assert {key: envelope[key] for key in failure.expect} == failure.expect
    if envelope["retryable"]:
        assert envelope["retry_after_ms"] > 0
    text = proxied["content"][0]["text"]
    assert text.rstrip().endswith(json.dumps({"error": envelope}, separators=(",", ":")))
    for value in failure.readable:
        assert value in envelope["message"] + envelope["hint"], value


async def test_an_unknown_tool_points_to_tools_list(start_mend: StartMend) -> None:
    """The time server answers an unknown tool with JSON-RPC -32602 (as direct); through mend
    the error keeps that code and its plan names tools/list, not the same call again."""
    async with behind_mend(time_server("Europe/Paris"), start_mend) as (direct_url, mend_url):
        direct = await rpc_error(direct_url, "get_time")
        proxied = await rpc_error(mend_url, "get_time")
    assert direct.code == proxied.code == -32602
    data = dict(proxied.error.data or {})
    assert (data["code"], data["next_operation"]) == ("OPERATION_NOT_FOUND", "tools/list")
    assert "tools/list" in proxied.message


async def test_a_reference_server_success_is_what_it_answers_direct(start_mend: StartMend) -> None:
    """A successful call (the time in UTC) has the same content and structuredContent through
    mend as direct, apart from the clock having moved."""
    async with behind_mend(time_server("Europe/Paris"), start_mend) as (direct_url, mend_url):
        direct = await call(direct_url, "get_current_time", {"timezone": "UTC"})
        proxied = await call(mend_url, "get_current_time", {"timezone": "UTC"})
    assert direct.get("isError") is proxied.get("isError") is False
    assert set(proxied) == set(direct)
    assert proxied["structuredContent"]["timezone"] == direct["structuredContent"]["timezone"]
    assert "mend/error" not in proxied.get("_meta", {})
