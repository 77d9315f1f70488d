"""Retry advice that knows whether the request may already have been applied (docs/contract.md §1).

Real upstreams on loopback that hang after reading a request, reset the connection after reading
all of it (SO_LINGER 0), refuse connections (a closed port) or never accept one (a full listen
queue); every method, with and without an ``Idempotency-Key``, through a real mend.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.conftest import Mend, StartMend, StartUpstream

IDEMPOTENT = ["GET", "PUT", "DELETE", "OPTIONS"]
WRITES = ["POST", "PATCH"]
#: seconds mend waits for an answer in these tests
READ_TIMEOUT = 0.3


class RawUpstream:
    """A TCP server that reads each request whole, then does ``then`` with the connection;
    counts the requests it read."""

    def __init__(self, then: Callable[[asyncio.StreamWriter], Awaitable[None]]) -> None:
        self.then = then
        self.requests = 0
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.decode("latin-1").split("\r\n"):
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                await reader.readexactly(length)
            self.requests += 1
            await self.then(writer)

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *_: object) -> None:
        assert self.server is not None
        self.server.close()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2):
                await self.server.wait_closed()


async def _hang(writer: asyncio.StreamWriter) -> None:
    await asyncio.sleep(3)  # past mend's read timeout; the test's server closes it
    writer.close()


async def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()  # with SO_LINGER 0: a TCP RST after the whole request was read


@contextlib.asynccontextmanager
async def _upstream(kind: str) -> AsyncIterator[tuple[str, RawUpstream | None]]:
    if kind == "refused":
        with socket.socket() as sock:  # bound, never listening: the port refuses
            sock.bind(("127.0.0.1", 0))
            yield f"http://127.0.0.1:{sock.getsockname()[1]}", None
        return
    raw = RawUpstream(_hang if kind == "hang" else _reset)
    async with raw as url:
        yield url, raw


async def _call(
    mend: Mend, method: str, *, key: str | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    headers = {"Idempotency-Key": key} if key else {}
    async with asyncio.timeout(10):
        response = await mend.client.request(
            method, "/orders/7", data=b'{"qty": 1}', headers=headers
        )
        error = (await response.json())["error"]
    assert isinstance(error, dict)
    return error, dict(response.headers)


async def _start(start_mend: StartMend, url: str) -> Mend:
    return await start_mend(url, route={"read_timeout": READ_TIMEOUT, "connect_timeout": 0.5})


async def _lost(
    start_mend: StartMend, kind: str, method: str, key: str | None = None
) -> tuple[dict[str, Any], dict[str, str], RawUpstream | None]:
    """The envelope and headers of ``method`` through mend to an upstream that ``kind``s it
    (hangs, resets, refuses), and the upstream that took it."""
    async with _upstream(kind) as (url, raw):
        mend = await _start(start_mend, url)
        error, headers = await _call(mend, method, key=key)
    return error, headers, raw


@pytest.mark.parametrize("kind", ["hang", "reset"])
@pytest.mark.parametrize("method", IDEMPOTENT)
async def test_idempotent_method_sent_then_lost_is_retryable(
    start_mend: StartMend, kind: str, method: str
) -> None:
    """An idempotent method that reached the upstream and got no answer: applied unknown, retry."""
    error, headers, raw = await _lost(start_mend, kind, method)
    assert raw is not None
    assert raw.requests >= 1
    assert error["code"] == ("UPSTREAM_TIMEOUT" if kind == "hang" else "UPSTREAM_PROTOCOL_ERROR")
    assert (error["applied"], error["retryable"], error["action"]) == ("unknown", True, "retry")
    assert int(headers["Retry-After"]) * 1000 >= error["retry_after_ms"]


@pytest.mark.parametrize("kind", ["hang", "reset"])
@pytest.mark.parametrize("method", WRITES)
async def test_write_sent_then_lost_is_not_retryable(
    start_mend: StartMend, kind: str, method: str
) -> None:
    """A POST or PATCH without a key that may have been applied: not retryable, check first."""
    error, headers, raw = await _lost(start_mend, kind, method)
    assert raw is not None
    assert raw.requests == 1
    assert (error["applied"], error["retryable"]) == ("unknown", False)
    assert (error["action"], error["retry_after_ms"]) == ("escalate", None)
    assert "may already have taken effect" in error["hint"]
    assert "Check whether it did" in " ".join(error["steps"])
    assert "Retry-After" not in headers


@pytest.mark.parametrize("kind", ["hang", "reset"])
@pytest.mark.parametrize("method", WRITES)
async def test_write_with_idempotency_key_is_retryable_with_the_same_key(
    start_mend: StartMend, kind: str, method: str
) -> None:
    """A POST or PATCH carrying an Idempotency-Key: retryable, and the plan says reuse the key."""
    error, headers, _ = await _lost(start_mend, kind, method, key="order-7-attempt")
    assert (error["applied"], error["retryable"], error["action"]) == ("unknown", True, "retry")
    assert "same Idempotency-Key" in error["hint"]
    assert any("same Idempotency-Key" in step for step in error["steps"])
    assert "order-7-attempt" not in error["hint"]  # the key's value is the agent's, not echoed
    assert "Retry-After" in headers


@pytest.mark.parametrize("method", [*IDEMPOTENT, *WRITES])
async def test_refused_connection_was_not_applied(start_mend: StartMend, method: str) -> None:
    """A refused connection sent nothing: applied no, retryable whatever the method."""
    error, headers, _ = await _lost(start_mend, "refused", method)
    assert error["code"] == "UPSTREAM_UNREACHABLE"
    assert (error["applied"], error["retryable"], error["action"]) == ("no", True, "retry")
    assert "Retry-After" in headers


async def test_log_line_names_applied(start_mend: StartMend) -> None:
    """The operator's request log line carries applied beside the code."""
    async with _upstream("reset") as (url, _):
        mend = await _start(start_mend, url)
        await _call(mend, "POST")
    line = next(entry for entry in mend.log_lines() if entry.get("event") == "request")
    assert (line["code"], line["applied"]) == ("UPSTREAM_PROTOCOL_ERROR", "unknown")


async def test_open_circuit_was_not_applied(start_mend: StartMend) -> None:
    """A POST answered by an open circuit never left mend: applied no, retryable."""
    async with _upstream("refused") as (url, _):
        mend = await start_mend(url, circuit={"failures": 1, "open_s": 30})
        await _call(mend, "POST")
        error, headers = await _call(mend, "POST")
    # the circuit's answer keeps the last real error's code and says it is the circuit's
    assert (error["code"], error["rule"]) == ("UPSTREAM_UNREACHABLE", "proxy.upstream_unavailable")
    assert "UPSTREAM_UNAVAILABLE" in error["related_codes"]
    assert (error["applied"], error["retryable"], error["action"]) == ("no", True, "retry")
    assert "Retry-After" in headers


async def test_head_sent_then_lost_is_retryable(start_mend: StartMend) -> None:
    """A HEAD (no body to read the envelope from) that hung: the retry's Retry-After is sent."""
    async with _upstream("hang") as (url, _):
        mend = await _start(start_mend, url)
        async with asyncio.timeout(10):
            response = await mend.client.head("/orders/7")
    assert response.headers["X-Error-Code"] == "UPSTREAM_TIMEOUT"
    assert int(response.headers["Retry-After"]) >= 1


@contextlib.contextmanager
def _full_listen_queue() -> Any:
    """A port whose listen queue is full: the kernel drops further SYNs, so a connect hangs."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    address = server.getsockname()
    fillers = []
    try:
        for _ in range(4):  # backlog 0 admits one or two; the rest wait in SYN_SENT
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(address)
            fillers.append(filler)
        yield f"http://127.0.0.1:{address[1]}"
    finally:
        for filler in fillers:
            filler.close()
        server.close()


async def test_connect_timeout_was_not_applied(start_mend: StartMend) -> None:
    """No connection within connect_timeout: nothing was sent, so even a POST is retryable."""
    with _full_listen_queue() as url:
        mend = await _start(start_mend, url)
        error, _ = await _call(mend, "POST")
    assert error["code"] == "UPSTREAM_TIMEOUT"
    assert (error["applied"], error["retryable"]) == ("no", True)


async def test_reset_get_reaches_the_upstream_once(start_mend: StartMend) -> None:
    """With retries off, a GET the upstream read and then reset is not sent again behind the
    agent's back: no hidden retry in the upstream client (the policy's are counted, and said in
    ``attempts``: docs/retries.md)."""
    async with _upstream("reset") as (url, raw):
        mend = await start_mend(
            url,
            route={"read_timeout": READ_TIMEOUT, "connect_timeout": 0.5},
            retries={"attempts": 1},
        )
        async with asyncio.timeout(10):
            response = await mend.client.get("/orders/7")  # no body: aiohttp's client re-sent it
        assert response.headers["X-Error-Code"] == "UPSTREAM_PROTOCOL_ERROR"
    assert raw is not None
    assert raw.requests == 1


@pytest.mark.parametrize(
    ("method", "operation", "safe", "advice"),
    [
        pytest.param("POST", "POST /orders/*", True, (True, "retry"), id="a-post-that-reads"),
        pytest.param("PUT", "PUT /orders/**", False, (False, "escalate"), id="a-put-that-appends"),
    ],
)
async def test_route_override_decides_a_resend(
    start_mend: StartMend, method: str, operation: str, safe: bool, advice: tuple[bool, str]
) -> None:
    """A route's retry_safe entry overrides the method after a hang: a POST that only reads is
    retryable, a PUT marked unsafe (an upstream that appends on PUT) is checked first."""
    async with _upstream("hang") as (url, _):
        mend = await start_mend(
            url,
            route={
                "read_timeout": READ_TIMEOUT,
                "retry_safe": [{"operation": operation, "safe": safe}],
            },
        )
        error, _ = await _call(mend, method)
    assert (error["applied"], error["retryable"], error["action"]) == ("unknown", *advice)


SHOP = Path(__file__).parents[2] / "data" / "openapi" / "shop-3.0.yaml"


async def _shop(start_upstream: StartUpstream, start_mend: StartMend) -> Mend:
    """The documented shop (servers: /api/v1) whose every answer comes too late."""

    async def late(_: web.Request) -> web.Response:
        await asyncio.sleep(3)
        return web.json_response({})

    server = await start_upstream({"/api/v1/{tail:.*}": late})
    url = str(server.make_url("/api/v1")).rstrip("/")
    return await start_mend(url, route={"openapi": SHOP, "read_timeout": READ_TIMEOUT})


@pytest.mark.parametrize(
    ("method", "path", "reader", "args"),
    [
        ("POST", "/orders", "GET /orders", None),
        ("PATCH", "/orders/7", "GET /orders/{orderId}", {"orderId": "7"}),
    ],
)
async def test_documented_write_names_the_read_operation_to_check(
    start_upstream: StartUpstream,
    start_mend: StartMend,
    method: str,
    path: str,
    reader: str,
    args: dict[str, str] | None,
) -> None:
    """A write that may have taken effect on a documented route: call the read operation first."""
    mend = await _shop(start_upstream, start_mend)
    async with asyncio.timeout(10):
        error = (await (await mend.client.request(method, path, json={})).json())["error"]
    assert (error["applied"], error["retryable"]) == ("unknown", False)
    assert (error["action"], error["next_operation"]) == ("call_other_operation", reader)
    assert error["next_operation_args"] == args
    assert f"Call {reader} to check whether it did" in error["hint"]


async def test_documented_write_without_a_read_operation_is_checked_in_words(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A documented write with no GET to check it by: the plan says how in plain words."""
    mend = await _shop(start_upstream, start_mend)
    async with asyncio.timeout(10):
        response = await mend.client.post("/orders/7/finalize", json={})
        error = (await response.json())["error"]
    assert (error["action"], error["next_operation"]) == ("escalate", None)
    assert "read the resource it creates or changes" in error["hint"]


async def test_request_body_cut_off_on_its_way_may_have_been_applied(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """An agent's body that stalls while mend streams it upstream: REQUEST_TIMEOUT, applied
    unknown (the upstream had part of it), so a POST is not retried blindly."""

    async def reads(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(text="ok")

    upstream = await start_upstream({"/orders": reads})
    mend = await start_mend(upstream, client_body_timeout=0.5)
    reader, writer = await asyncio.open_connection(mend.client.host, mend.client.port)
    try:
        writer.write(
            b"POST /orders HTTP/1.1\r\nHost: shop\r\nTransfer-Encoding: chunked\r\n"
            b'Content-Type: application/json\r\n\r\n5\r\n{"a":\r\n'
        )
        await writer.drain()  # then nothing more: the body stalls mid-stream
        async with asyncio.timeout(10):
            answer = await reader.read(65536)
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"X-Error-Code: REQUEST_TIMEOUT" in head
    error = json.loads(body)["error"]
    assert (error["applied"], error["retryable"]) == ("unknown", False)


_MCP = {"MCP-Protocol-Version": "2025-06-18", "Accept": "application/json, text/event-stream"}


def _envelope(answer: dict[str, Any]) -> Any:
    """The envelope of a JSON-RPC answer: a tool call's failure is an ``isError`` result (the
    tool's failure reaches the model), any other request's a JSON-RPC error."""
    if "result" in answer:
        assert answer["result"]["isError"] is True
        return answer["result"]["_meta"]["mend/error"]
    return answer["error"]["data"]


@pytest.mark.parametrize(
    ("method", "params", "retryable"),
    [
        ("resources/read", {"uri": "file:///orders/7"}, True),
        ("tools/list", {}, True),
        ("tools/call", {"name": "create_order", "arguments": {}}, False),
    ],
)
async def test_mcp_requests_other_than_tool_calls_only_read(
    start_mend: StartMend, method: str, params: dict[str, Any], retryable: bool
) -> None:
    """A hung MCP request: listing or reading is retried; a tool call nobody described is not."""
    async with _upstream("hang") as (url, _):
        mend = await start_mend(url, route={"read_timeout": READ_TIMEOUT, "protocol": "mcp"})
        call = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
        async with asyncio.timeout(10):
            response = await mend.client.post("/mcp", json=call, headers=_MCP)
            answer = await response.json()
    error = _envelope(answer)
    assert answer["id"] == 7
    assert (error["applied"], error["retryable"]) == ("unknown", retryable)
    # a JSON-RPC answer (HTTP 200) carries Retry-After too when the envelope is retryable
    assert ("Retry-After" in response.headers) is retryable


@pytest.mark.parametrize(
    ("document", "retryable"),
    [
        ("query Orders { orders { id } }", True),
        ("{ order(id: 7) { id } }", True),
        ("mutation Pay { pay(order: 7) { id } }", False),
    ],
)
async def test_graphql_query_is_retried_and_mutation_checked_first(
    start_mend: StartMend, document: str, retryable: bool
) -> None:
    """A hung GraphQL POST: a query only reads and is retried; a mutation is not."""
    async with _upstream("hang") as (url, _):
        mend = await start_mend(url, route={"read_timeout": READ_TIMEOUT, "protocol": "graphql"})
        async with asyncio.timeout(10):
            response = await mend.client.post("/graphql", json={"query": document})
            answer = await response.json()
    error = answer["errors"][0]["extensions"]["mend"]
    assert (error["applied"], error["retryable"]) == ("unknown", retryable)


@pytest.mark.parametrize("status", [429, 503])
async def test_answers_that_say_not_processed_keep_their_advice(
    start_upstream: StartUpstream, start_mend: StartMend, status: int
) -> None:
    """A POST answered 429 or 503 was not processed: retryable as before, no applied field."""

    async def refuse(_: web.Request) -> web.Response:
        return web.json_response({"message": "busy"}, status=status, headers={"Retry-After": "3"})

    mend = await start_mend(await start_upstream({"/orders": refuse}))
    async with asyncio.timeout(10):
        response = await mend.client.post("/orders", json={"qty": 1})
        error = (await response.json())["error"]
    assert (error["retryable"], error["action"], error["retry_after_ms"]) == (True, "retry", 3000)
    assert "applied" not in error
    assert "may already have taken effect" not in error["hint"]
    assert response.headers["Retry-After"] == "3"


async def _sse_then_reset(writer: asyncio.StreamWriter) -> None:
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    await writer.drain()
    await asyncio.sleep(0.2)
    await _reset(writer)


async def test_event_stream_reset_before_the_answer_ends_with_one(start_mend: StartMend) -> None:
    """An MCP server that opens its event stream, then resets: the stream ends with an event
    answering the call (UPSTREAM_PROTOCOL_ERROR, applied unknown), not a cut connection."""
    async with RawUpstream(_sse_then_reset) as url:
        mend = await start_mend(url, route={"protocol": "mcp"})
        call = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "pay"}}
        async with asyncio.timeout(10):
            response = await mend.client.post("/mcp", json=call, headers=_MCP)
            text = await response.text()
    assert response.headers["Content-Type"].startswith("text/event-stream")
    data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    answer = json.loads(data[-1])
    error = _envelope(answer)
    assert answer["id"] == 9
    assert error["code"] == "UPSTREAM_PROTOCOL_ERROR"
    assert (error["applied"], error["retryable"]) == ("unknown", False)
