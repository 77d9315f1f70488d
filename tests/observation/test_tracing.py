"""Traces: mend's spans as a real OTLP/HTTP receiver decodes them (docs/contract.md §10).

mend runs with the OpenTelemetry SDK and its OTLP/HTTP exporter, configured by ``OTEL_*``
variables or a ``tracing:`` block; the receiver (``tests/otlp_receiver.py``) decodes what it
sends with ``opentelemetry-proto``. Upstreams are real aiohttp and MCP SDK 2.x (``MCPServer``)
servers.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from proxy.config import trace_config
from proxy.config.otel import TracingError, TracingSettings
from proxy.config.route import Route
from proxy.config.settings import Settings
from proxy.observation import tracing
from proxy.observation.logs import make_logger
from proxy.runtime.admin import create_admin_app
from proxy.runtime.app import create_app
from tests.conftest import Mend, MendTestServer, StartUpstream
from tests.otlp_receiver import CLIENT, ERROR, SERVER, UNSET, Received, Receiver, app
from tests.policy.protocols.test_mcp import mcp_server, serving, session
from tests.runtime.test_app import free_port

ROOT = Path(__file__).resolve().parents[2]

AGENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
AGENT_SPAN = "00f067aa0ba902b7"
AGENT_PARENT = f"00-{AGENT_TRACE}-{AGENT_SPAN}-01"


@dataclass
class Traced:
    """mend with a tracer exporting to ``receiver``."""

    mend: Mend
    receiver: Receiver
    #: the admin port's /metrics, as Prometheus scrapes it (OpenMetrics, exemplars included)
    scrape: Callable[[], Awaitable[str]]


StartTraced = Callable[..., Awaitable[Traced]]


@pytest.fixture
async def receiver(
    aiohttp_server: Callable[..., Awaitable[TestServer]],
) -> Receiver:
    """A running OTLP/HTTP receiver on loopback."""
    found = Receiver()
    server = await aiohttp_server(app(found))
    found.url = str(server.make_url("/")).rstrip("/")
    return found


@pytest.fixture
async def start_traced(
    receiver: Receiver,
    aiohttp_client: Callable[..., Awaitable[TestClient[Any, Any]]],
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[StartTraced]:
    """Start mend in front of ``upstream`` with ``OTEL_EXPORTER_OTLP_ENDPOINT`` naming the
    receiver (``env`` adds variables, ``tracing`` is the block); spans leave every 50 ms."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    tracers = []

    async def start(
        upstream: str | TestServer,
        *,
        env: dict[str, str] | None = None,
        tracing_block: dict[str, Any] | None = None,
        route: dict[str, Any] | None = None,
    ) -> Traced:
        url = upstream if isinstance(upstream, str) else str(upstream.make_url("/")).rstrip("/")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        for name, value in (env or {}).items():  # the SDK reads some of them itself
            monkeypatch.setenv(name, value)
        settings = Settings(
            routes=(Route(name="default", upstream=url, **(route or {})),),
            tracing=TracingSettings(**(tracing_block or {})),
        )
        tracer = tracing.start(tracing.check(settings.tracing, os.environ))
        tracers.append(tracer)
        registry = CollectorRegistry()
        log = io.StringIO()
        server = create_app(settings, registry, logger=make_logger(log), tracer=tracer)
        client = await aiohttp_client(MendTestServer(server))
        admin = await aiohttp_client(create_admin_app(server.proxy.store, registry))

        async def scrape() -> str:
            accept = {"Accept": "application/openmetrics-text; version=1.0.0"}
            async with admin.get("/metrics", headers=accept) as response:
                return await response.text()

        return Traced(Mend(client, registry, log), receiver, scrape)

    yield start
    for tracer in tracers:
        if tracer is not None:
            await tracer.close()


async def ok(_: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def fail(_: web.Request) -> web.Response:
    return web.Response(status=500, text="Internal Server Error", content_type="text/plain")


# --- HTTP: server and client spans -----------------------------------------------------------


async def test_a_request_is_a_server_span_with_the_http_attributes(
    start_upstream: StartUpstream, start_traced: StartTraced
) -> None:
    """A proxied /ok is one SERVER span: method, path, route and status as HTTP semconv."""
    traced = await start_traced(await start_upstream({"GET /ok": ok}))
    response = await traced.mend.client.get("/ok")
    assert response.status == 200
    await traced.receiver.wait(2)
    server = traced.receiver.one(SERVER)
    assert server.name == "GET /"
    assert server.attributes["http.request.method"] == "GET"
    assert server.attributes["url.path"] == "/ok"
    assert server.attributes["http.route"] == "/"
    assert server.attributes["mend.route"] == "default"
    assert server.attributes["http.response.status_code"] == 200
    assert server.status == UNSET
    assert server.parent_id == ""


async def test_the_upstream_call_is_a_client_child_span(
    start_upstream: StartUpstream, start_traced: StartTraced
) -> None:
    """The upstream call is a CLIENT span under the server span, naming the upstream."""
    upstream = await start_upstream({"GET /ok": ok})
    traced = await start_traced(upstream)
    await traced.mend.client.get("/ok")
    await traced.receiver.wait(2)
    server, client = traced.receiver.one(SERVER), traced.receiver.one(CLIENT)
    assert (client.trace_id, client.parent_id) == (server.trace_id, server.span_id)
    assert client.attributes["server.address"] == "127.0.0.1"
    assert client.attributes["server.port"] == upstream.port
    assert client.attributes["http.response.status_code"] == 200


async def test_a_rewritten_error_sets_status_error_and_the_envelope_code(
    start_upstream: StartUpstream, start_traced: StartTraced
) -> None:
    """An upstream 500 rewritten to an envelope: status ERROR, error.type = code, rule, id."""
    traced = await start_traced(await start_upstream({"GET /boom": fail}))
    response = await traced.mend.client.get("/boom")
    envelope = (await response.json())["error"]
    await traced.receiver.wait(2)
    server = traced.receiver.one(SERVER)
    assert server.status == ERROR
    assert server.attributes["error.type"] == envelope["code"]
    assert server.attributes["mend.rule"] == envelope["rule"]
    assert server.attributes["mend.request_id"] == envelope["request_id"]
    assert server.attributes["http.response.status_code"] == 500


async def test_the_client_span_of_an_upstream_error_is_an_error(
    start_upstream: StartUpstream, start_traced: StartTraced
) -> None:
    """The CLIENT span of an upstream 500 has status ERROR and error.type "500"."""
    traced = await start_traced(await start_upstream({"GET /boom": fail}))
    await traced.mend.client.get("/boom")
    await traced.receiver.wait(2)
    client = traced.receiver.one(CLIENT)
    assert (client.status, client.attributes["error.type"]) == (ERROR, "500")


async def test_an_unreachable_upstream_is_an_error_span_with_mends_code(
    start_traced: StartTraced,
) -> None:
    """Nothing listening upstream: the server span carries UPSTREAM_UNREACHABLE, the client
    span the connection error."""
    traced = await start_traced(
        f"http://127.0.0.1:{free_port()}", route={"retries": {"attempts": 1}}
    )
    response = await traced.mend.client.get("/x")
    code = (await response.json())["error"]["code"]
    await traced.receiver.wait(2)
    server, client = traced.receiver.one(SERVER), traced.receiver.one(CLIENT)
    assert (server.status, server.attributes["error.type"]) == (ERROR, code)
    assert code == "UPSTREAM_UNREACHABLE"
    assert client.status == ERROR
    assert "Connect" in client.attributes["error.type"]


async def test_each_try_of_a_retried_request_is_a_client_span(
    start_upstream: StartUpstream, start_traced: StartTraced
) -> None:
    """A 503 sent again (docs/retries.md) is two CLIENT spans under the one SERVER span; the
    second carries OpenTelemetry's ``http.request.resend_count``, and the request succeeds."""
    answers = iter([503])

    async def flaky(_: web.Request) -> web.Response:
        status = next(answers, 200)
        return web.json_response({"ok": status == 200}, status=status)

    traced = await start_traced(await start_upstream({"GET /flaky": flaky}))
    response = await traced.mend.client.get("/flaky")
    assert response.status == 200
    await traced.receiver.wait(3)
    server = traced.receiver.one(SERVER)
    clients = [span for span in traced.receiver.spans if span.kind == CLIENT]
    assert [c.attributes["http.response.status_code"] for c in clients] == [503, 200]
    assert {c.parent_id for c in clients} == {server.span_id}
    assert "http.request.resend_count" not in clients[0].attributes
    assert clients[1].attributes["http.request.resend_count"] == 1


async def test_a_long_path_is_cut_in_the_span(
    start_upstream: StartUpstream, start_traced: StartTraced
) -> None:
    """A 6,000-character path: url.path is cut to ATTRIBUTE_LENGTH characters."""
    from proxy.observation.traces import ATTRIBUTE_LENGTH  # noqa: PLC0415 - the SDK module, as mend loads it

    traced = await start_traced(await start_upstream({"/{tail:.*}": ok}))
    path = "/" + "a" * 6_000
    assert (await traced.mend.client.get(path)).status == 200
    await traced.receiver.wait(2)
    assert traced.receiver.one(SERVER).attributes["url.path"] == path[:ATTRIBUTE_LENGTH]


# --- context: traceparent in and out ---------------------------------------------------------


async def test_an_agent_traceparent_is_continued(
    start_upstream: StartUpstream, start_traced: StartTraced
) -> None:
    """The agent's traceparent: same trace id, mend's server span a child of the agent's."""
    traced = await start_traced(await start_upstream({"GET /ok": ok}))
    await traced.mend.client.get("/ok", headers={"traceparent": AGENT_PARENT})
    await traced.receiver.wait(2)
    server = traced.receiver.one(SERVER)
    assert (server.trace_id, server.parent_id) == (AGENT_TRACE, AGENT_SPAN)


async def test_the_upstream_gets_a_traceparent_whose_parent_is_the_client_span(
    start_upstream: StartUpstream, start_traced: StartTraced
) -> None:
    """mend forwards a traceparent naming its CLIENT span, and the agent's tracestate."""
    seen: list[tuple[str | None, str | None]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append((request.headers.get("traceparent"), request.headers.get("tracestate")))
        return web.json_response({})

    traced = await start_traced(await start_upstream({"GET /ok": record}))
    headers = {"traceparent": AGENT_PARENT, "tracestate": "vendor=abc"}
    await traced.mend.client.get("/ok", headers=headers)
    await traced.receiver.wait(2)
    client = traced.receiver.one(CLIENT)
    assert seen == [(f"00-{AGENT_TRACE}-{client.span_id}-01", "vendor=abc")]


async def test_a_new_trace_id_is_the_request_id_and_in_the_log_line(
    start_upstream: StartUpstream, start_traced: StartTraced
) -> None:
    """With no id from the agent, the envelope's request_id and the log line's trace_id are
    the id of the trace mend started."""
    traced = await start_traced(await start_upstream({"GET /boom": fail}))
    response = await traced.mend.client.get("/boom")
    request_id = (await response.json())["error"]["request_id"]
    await traced.receiver.wait(2)
    server = traced.receiver.one(SERVER)
    line = next(line for line in traced.mend.log_lines() if line.get("event") == "request")
    assert request_id == server.trace_id == line["trace_id"]


async def test_a_malformed_traceparent_starts_a_new_trace(
    start_upstream: StartUpstream, start_traced: StartTraced
) -> None:
    """A traceparent that is not W3C's is ignored: a root span, and a fresh one goes upstream."""
    seen: list[str | None] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(request.headers.get("traceparent"))
        return web.json_response({})

    traced = await start_traced(await start_upstream({"GET /ok": record}))
    await traced.mend.client.get("/ok", headers={"traceparent": "00-" + "z" * 32 + "-x-01"})
    await traced.receiver.wait(2)
    server, client = traced.receiver.one(SERVER), traced.receiver.one(CLIENT)
    assert server.parent_id == ""
    assert seen[0] is not None
    assert seen[0].startswith(f"00-{server.trace_id}-{client.span_id}-")


async def test_an_oversized_tracestate_is_dropped_and_the_trace_continued(
    start_upstream: StartUpstream, start_traced: StartTraced
) -> None:
    """A 40 KB tracestate (over W3C's limits): the trace is still continued, and the upstream
    gets mend's traceparent with no tracestate."""
    seen: list[tuple[str | None, str | None]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append((request.headers.get("traceparent"), request.headers.get("tracestate")))
        return web.json_response({})

    traced = await start_traced(await start_upstream({"GET /ok": record}))
    headers = {"traceparent": AGENT_PARENT, "tracestate": "a=b, " * 8_000}
    assert (await traced.mend.client.get("/ok", headers=headers)).status == 200
    await traced.receiver.wait(2)
    assert traced.receiver.one(SERVER).trace_id == AGENT_TRACE
    assert seen[0][0] is not None
    assert seen[0][0].startswith(f"00-{AGENT_TRACE}-")
    assert seen[0][1] is None


# --- configuration ---------------------------------------------------------------------------


async def test_the_service_name_defaults_to_mend_and_takes_resource_attributes(
    start_upstream: StartUpstream, start_traced: StartTraced
) -> None:
    """service.name is mend unless set; OTEL_RESOURCE_ATTRIBUTES reach the resource."""
    env = {"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=staging"}
    traced = await start_traced(await start_upstream({"GET /ok": ok}), env=env)
    await traced.mend.client.get("/ok")
    spans = await traced.receiver.wait(2)
    assert spans[0].resource["service.name"] == "mend"
    assert spans[0].resource["deployment.environment.name"] == "staging"


async def test_the_tracing_block_wins_over_the_variables(
    start_upstream: StartUpstream, start_traced: StartTraced
) -> None:
    """``tracing: {service_name}`` wins over OTEL_SERVICE_NAME."""
    traced = await start_traced(
        await start_upstream({"GET /ok": ok}),
        env={"OTEL_SERVICE_NAME": "from-env"},
        tracing_block={"service_name": "from-block"},
    )
    await traced.mend.client.get("/ok")
    spans = await traced.receiver.wait(2)
    assert spans[0].resource["service.name"] == "from-block"


async def test_always_off_exports_nothing_and_still_forwards_a_traceparent(
    start_upstream: StartUpstream, start_traced: StartTraced
) -> None:
    """OTEL_TRACES_SAMPLER=always_off: no span exported; the upstream still gets the trace,
    flagged not sampled."""
    seen: list[str | None] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(request.headers.get("traceparent"))
        return web.json_response({})

    env = {"OTEL_TRACES_SAMPLER": "always_off"}
    traced = await start_traced(await start_upstream({"GET /ok": record}), env=env)
    await traced.mend.client.get("/ok", headers={"traceparent": AGENT_PARENT[:-2] + "00"})
    await traced.mend.client.get("/ok")
    with pytest.raises(TimeoutError):
        await traced.receiver.wait(1, within=0.5)
    assert seen[0] is not None
    assert seen[0].startswith(f"00-{AGENT_TRACE}-")
    assert seen[0].endswith("-00")


def test_no_configuration_means_no_tracer() -> None:
    """No endpoint in the block or the variables: tracing is off."""
    assert trace_config.resolve(TracingSettings(), {"OTEL_SERVICE_NAME": "x"}) is None


def test_sdk_disabled_turns_tracing_off() -> None:
    """OTEL_SDK_DISABLED=true wins over an endpoint."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"}
    assert trace_config.resolve(TracingSettings(), env) is None


def test_enabled_false_in_the_block_wins_over_the_variables() -> None:
    """``tracing: {enabled: false}`` keeps tracing off whatever OTEL_* say."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
    assert trace_config.resolve(TracingSettings(enabled=False), env) is None


def test_traces_exporter_none_turns_tracing_off() -> None:
    """OTEL_TRACES_EXPORTER=none wins over an endpoint, as in any SDK."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "none"}
    assert trace_config.resolve(TracingSettings(), env) is None


def test_enabled_true_without_an_endpoint_sends_to_the_local_collector() -> None:
    """``enabled: true`` and no endpoint: the collector's default OTLP/HTTP address."""
    config = trace_config.resolve(TracingSettings(enabled=True), {})
    assert config is not None
    assert config.endpoint == "http://localhost:4318/v1/traces"


def test_the_traces_endpoint_wins_over_the_base_endpoint() -> None:
    """OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is used as is; the base one gets /v1/traces."""
    base = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}
    both = {**base, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://other:4318/t"}
    first = trace_config.resolve(TracingSettings(), base)
    second = trace_config.resolve(TracingSettings(), both)
    assert first is not None
    assert first.endpoint == "http://collector:4318/v1/traces"
    assert second is not None
    assert second.endpoint == "http://other:4318/t"


@pytest.mark.parametrize("protocol", ["grpc", "http/json"])
def test_a_protocol_other_than_http_protobuf_is_refused(protocol: str) -> None:
    """OTEL_EXPORTER_OTLP_PROTOCOL other than http/protobuf: an error naming the variable."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": protocol}
    with pytest.raises(TracingError, match="OTEL_EXPORTER_OTLP_PROTOCOL"):
        trace_config.resolve(TracingSettings(), env)


def test_an_unknown_sampler_is_refused() -> None:
    """OTEL_TRACES_SAMPLER must be one the SDK knows: no silent fallback."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_SAMPLER": "sometimes"}
    with pytest.raises(TracingError, match="sometimes"):
        trace_config.resolve(TracingSettings(), env)


def test_an_endpoint_that_is_not_http_is_refused() -> None:
    """An endpoint must be an http(s) URL."""
    with pytest.raises(TracingError, match="OTEL_EXPORTER_OTLP_ENDPOINT"):
        trace_config.resolve(TracingSettings(), {"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"})


# --- MCP, JSON-RPC and GraphQL in their conventions ------------------------------------------

MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "MCP-Protocol-Version": "2025-06-18",
}


def rpc(method: str, params: dict[str, Any], id_: int | None = 1) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if id_ is not None:
        message["id"] = id_
    return message


def call_tool(name: str, arguments: dict[str, Any], **meta: str) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if meta:
        params["_meta"] = meta
    return rpc("tools/call", params, id_=7)


def named(receiver: Receiver, name: str) -> Received:
    found = [span for span in receiver.spans if span.name == name]
    assert len(found) == 1, [span.name for span in receiver.spans]
    return found[0]


async def test_a_tools_call_span_is_named_for_the_tool_with_mcp_attributes(
    start_traced: StartTraced,
) -> None:
    """A session's tools/call: span ``tools/call <tool>`` with mcp.method.name,
    gen_ai.tool.name, jsonrpc.request.id, mcp.session.id and mcp.protocol.version."""
    async with serving(mcp_server(), json_response=True) as upstream:
        traced = await start_traced(upstream)
        client = traced.mend.client
        opened = await client.post(
            "/mcp",
            json=rpc(
                "initialize",
                {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            ),
            headers=MCP_HEADERS,
        )
        session = opened.headers["Mcp-Session-Id"]
        headers = {**MCP_HEADERS, "Mcp-Session-Id": session}
        await client.post("/mcp", json=rpc("notifications/initialized", {}, None), headers=headers)
        answer = await client.post(
            "/mcp", json=call_tool("create_issue", {"title": "a", "priority": 1}), headers=headers
        )
        assert (await answer.json())["result"]["isError"] is False
        await traced.receiver.wait(6)
    span = named(traced.receiver, "tools/call create_issue")
    assert span.kind == SERVER
    assert span.attributes["mcp.method.name"] == "tools/call"
    assert span.attributes["gen_ai.tool.name"] == "create_issue"
    assert span.attributes["jsonrpc.request.id"] == "7"
    assert span.attributes["mcp.session.id"] == session
    assert span.attributes["mcp.protocol.version"] == "2025-06-18"
    assert span.status == UNSET


async def test_an_is_error_result_is_an_error_span_with_the_envelope_code(
    start_traced: StartTraced,
) -> None:
    """A tool result with isError (HTTP 200): the span has status ERROR and error.type = the
    code of the envelope mend put in its _meta."""
    async with serving(mcp_server(), json_response=True, stateless=True) as upstream:
        traced = await start_traced(upstream)
        answer = await traced.mend.client.post(
            "/mcp",
            json=call_tool("create_issue", {"title": "explode", "priority": 1}),
            headers=MCP_HEADERS,
        )
        result = (await answer.json())["result"]
        await traced.receiver.wait(2)
    assert answer.status == 200
    assert result["isError"] is True
    span = named(traced.receiver, "tools/call create_issue")
    assert span.status == ERROR
    assert span.attributes["error.type"] == result["_meta"]["mend/error"]["code"]


async def test_an_is_error_event_is_an_error_span_when_the_sdk_client_hangs_up(
    start_traced: StartTraced,
) -> None:
    """The official SDK client over SSE reads its tool result and closes the stream: the span
    still has status ERROR and the envelope's code (an isError must not pass as a success).

    The client runs the initialize handshake (legacy mode): on revision 2026-07-28 the SDK 2.x
    server answers a tool that returns at once with JSON, not an event stream."""
    async with serving(mcp_server(), json_response=False) as upstream:
        traced = await start_traced(upstream)
        async with session(str(traced.mend.client.make_url("/mcp")), "legacy") as client:
            result = await client.call_tool("create_issue", {"title": "explode", "priority": 1})
        assert result.is_error is True
        assert result.meta is not None
        await traced.receiver.wait(4)
        await asyncio.sleep(0.3)  # the session's last requests (GET stream, DELETE) end too
    span = named(traced.receiver, "tools/call create_issue")
    assert span.status == ERROR
    assert span.attributes["error.type"] == result.meta["mend/error"]["code"]


async def test_an_is_error_event_stays_an_error_span_when_the_agent_leaves_mid_stream(
    start_upstream: StartUpstream, start_traced: StartTraced
) -> None:
    """An SSE answer whose isError event reached the agent, which then hung up before the
    stream ended: the span (and the log line) still carry the envelope's code, status ERROR."""
    event = {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {"content": [{"type": "text", "text": "Error: boom"}], "isError": True},
    }

    async def sse(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(f"event: message\ndata: {json.dumps(event)}\n\n".encode())
        await asyncio.sleep(0.5)  # the agent has its answer and hangs up meanwhile
        return response

    traced = await start_traced(await start_upstream({"POST /mcp": sse}))
    body = call_tool("create_issue", {"title": "a", "priority": 1})
    async with traced.mend.client.post("/mcp", json=body, headers=MCP_HEADERS) as answer:
        first = await answer.content.readuntil(b"\n\n")
    code = json.loads(first.split(b"data: ", 1)[1])["result"]["_meta"]["mend/error"]["code"]
    await traced.receiver.wait(2)
    span = named(traced.receiver, "tools/call create_issue")
    line = next(line for line in traced.mend.log_lines() if line.get("event") == "request")
    assert (span.status, span.attributes["error.type"]) == (ERROR, code)
    assert (line["outcome"], line["code"]) == ("client_closed", code)


async def test_an_mcp_meta_traceparent_is_the_parent_when_no_header_is_sent(
    start_traced: StartTraced,
) -> None:
    """SEP-414: params._meta.traceparent parents the span when there is no traceparent header."""
    async with serving(mcp_server(), json_response=True, stateless=True) as upstream:
        traced = await start_traced(upstream)
        body = call_tool("create_issue", {"title": "a", "priority": 1}, traceparent=AGENT_PARENT)
        await traced.mend.client.post("/mcp", json=body, headers=MCP_HEADERS)
        await traced.receiver.wait(2)
    span = named(traced.receiver, "tools/call create_issue")
    assert (span.trace_id, span.parent_id) == (AGENT_TRACE, AGENT_SPAN)
    assert traced.receiver.one(CLIENT).trace_id == AGENT_TRACE


async def test_the_traceparent_header_wins_over_mcp_meta(start_traced: StartTraced) -> None:
    """A traceparent header and a different _meta.traceparent: the header is the parent."""
    other = f"00-{'1' * 32}-{'2' * 16}-01"
    async with serving(mcp_server(), json_response=True, stateless=True) as upstream:
        traced = await start_traced(upstream)
        body = call_tool("create_issue", {"title": "a", "priority": 1}, traceparent=other)
        headers = {**MCP_HEADERS, "traceparent": AGENT_PARENT}
        await traced.mend.client.post("/mcp", json=body, headers=headers)
        await traced.receiver.wait(2)
    span = named(traced.receiver, "tools/call create_issue")
    assert (span.trace_id, span.parent_id) == (AGENT_TRACE, AGENT_SPAN)


async def test_a_json_rpc_call_span_is_named_for_its_method(
    start_upstream: StartUpstream, start_traced: StartTraced
) -> None:
    """A plain JSON-RPC call answered with an error: span named for the method, rpc.* set,
    status ERROR with the envelope's code."""

    async def rpc_error(request: web.Request) -> web.Response:
        sent = await request.json()
        error = {"code": -32602, "message": "Invalid params: qty must be positive"}
        return web.json_response({"jsonrpc": "2.0", "id": sent["id"], "error": error})

    traced = await start_traced(await start_upstream({"POST /rpc": rpc_error}))
    answer = await traced.mend.client.post("/rpc", json=rpc("orders.create", {"qty": -1}))
    code = (await answer.json())["error"]["data"]["code"]
    await traced.receiver.wait(2)
    span = named(traced.receiver, "orders.create")
    assert span.attributes["rpc.method"] == "orders.create"
    assert span.attributes["jsonrpc.request.id"] == "1"
    assert (span.status, span.attributes["error.type"]) == (ERROR, code)


async def test_a_graphql_span_is_named_by_its_operation(
    start_upstream: StartUpstream, start_traced: StartTraced
) -> None:
    """A GraphQL request's span is named by its operationName."""

    async def graphql(_: web.Request) -> web.Response:
        return web.json_response({"data": {"order": {"id": "1"}}})

    traced = await start_traced(await start_upstream({"POST /graphql": graphql}))
    query = {"query": "query GetOrder { order { id } }", "operationName": "GetOrder"}
    await traced.mend.client.post("/graphql", json=query)
    await traced.receiver.wait(2)
    span = named(traced.receiver, "GetOrder")
    assert span.attributes["graphql.operation.name"] == "GetOrder"


# --- mend run: the variables as an operator sets them ------------------------------------------


@dataclass
class Running:
    """A ``mend run`` process: its agent and admin URLs."""

    url: str
    admin: str
    proc: asyncio.subprocess.Process


@asynccontextmanager
async def mend_run(
    upstream: str, env: dict[str, str], *args: str, python: tuple[str, ...] = ()
) -> AsyncIterator[Running]:
    """``python -m proxy run`` in front of ``upstream`` with ``env`` added."""
    listen, admin = free_port(), free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *python,
        "-m",
        "proxy",
        "run",
        "--upstream",
        upstream,
        "--listen",
        f"127.0.0.1:{listen}",
        "--admin-listen",
        f"127.0.0.1:{admin}",
        *args,
        cwd=ROOT,
        env={**environ, **env},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(30), aiohttp.ClientSession() as probe:
            while True:
                try:
                    async with probe.get(f"http://127.0.0.1:{admin}/readyz") as ready:
                        if ready.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.1)
        yield Running(f"http://127.0.0.1:{listen}", f"http://127.0.0.1:{admin}", proc)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(30):
                await proc.wait()


async def test_mend_run_exports_with_the_otel_variables(
    start_upstream: StartUpstream, receiver: Receiver
) -> None:
    """``mend run`` with OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_SERVICE_NAME exports both spans
    under that service; the last ones leave at SIGTERM, before the schedule would send them."""
    upstream = await start_upstream({"GET /ok": ok})
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_SERVICE_NAME": "orders-sidecar",
        "OTEL_BSP_SCHEDULE_DELAY": "600000",
    }
    async with mend_run(str(upstream.make_url("")), env) as running:
        url, proc = running.url, running.proc
        async with aiohttp.ClientSession() as client, client.get(f"{url}/ok") as response:
            assert response.status == 200
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            await proc.wait()
    spans = await traced_spans(receiver, 2)
    assert {span.kind for span in spans} == {SERVER, CLIENT}
    assert {span.resource["service.name"] for span in spans} == {"orders-sidecar"}


async def traced_spans(receiver: Receiver, count: int) -> list[Received]:
    return await receiver.wait(count, within=10)


async def test_mend_run_without_tracing_never_imports_the_sdk(
    start_upstream: StartUpstream,
) -> None:
    """No OTEL_* variable: a proxied request, and not one OpenTelemetry module imported."""
    upstream = await start_upstream({"GET /ok": ok})
    async with mend_run(str(upstream.make_url("")), {}, python=("-X", "importtime")) as running:
        url, proc = running.url, running.proc
        async with aiohttp.ClientSession() as client, client.get(f"{url}/ok") as response:
            assert response.status == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.stderr is not None
        async with asyncio.timeout(30):
            imported = (await proc.stderr.read()).decode()
    assert "proxy.runtime.app" in imported  # the import log is there
    assert "opentelemetry" not in imported


async def test_mend_run_with_tracing_disabled_exports_nothing(
    start_upstream: StartUpstream, receiver: Receiver
) -> None:
    """OTEL_SDK_DISABLED=true with an endpoint: requests served, nothing reaches the receiver."""
    upstream = await start_upstream({"GET /boom": fail})
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_SDK_DISABLED": "true",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }
    async with mend_run(str(upstream.make_url("")), env) as running:
        url, proc = running.url, running.proc
        async with aiohttp.ClientSession() as client, client.get(f"{url}/boom") as response:
            assert response.status == 500
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            await proc.wait()
    assert receiver.requests == 0


def run_refused(
    env: dict[str, str], python: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [sys.executable, *python, "-m", "proxy", "run", "--upstream", "http://127.0.0.1:9"],
        cwd=ROOT,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_an_unsupported_protocol_stops_mend_run_with_one_line() -> None:
    """OTEL_EXPORTER_OTLP_PROTOCOL=grpc: ``mend: error:`` naming it, exit status 2."""
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
    }
    result = run_refused(env)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "mend: error: OTEL_EXPORTER_OTLP_PROTOCOL='grpc': mend exports http/protobuf only"
    ]


def test_tracing_without_the_extra_stops_mend_run_with_one_line(tmp_path: Path) -> None:
    """OTEL_* set where the SDK is not installed (an empty ``opentelemetry`` package shadows
    it): one ``mend: error:`` line naming the variable and the extra to install."""
    (tmp_path / "opentelemetry").mkdir()
    (tmp_path / "opentelemetry" / "__init__.py").write_text("")
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "PYTHONPATH": str(tmp_path)}
    result = run_refused(env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("mend: error: tracing is configured (OTEL_EXPORTER_OTLP_ENDPOINT)")
    assert lines[0].endswith("pip install 'mend[tracing]'")


@pytest.mark.slow
async def test_each_worker_exports_its_own_spans(
    start_upstream: StartUpstream, receiver: Receiver
) -> None:
    """``--workers 2``: spans from both worker processes (process.pid) reach the receiver."""
    upstream = await start_upstream({"GET /ok": ok})
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "50"}
    pids: set[int] = set()
    async with mend_run(str(upstream.make_url("")), env, "--workers", "2") as running:
        url = running.url
        async with asyncio.timeout(30):
            while len(pids) < 2:  # a new connection each time: SO_REUSEPORT spreads them
                async with aiohttp.ClientSession() as client, client.get(f"{url}/ok") as answer:
                    assert answer.status == 200
                await asyncio.sleep(0.05)
                pids = {span.resource["process.pid"] for span in receiver.spans}
    assert len(pids) == 2


# --- metrics exemplars -------------------------------------------------------------------------


async def test_error_and_latency_exemplars_carry_the_trace_id(
    start_upstream: StartUpstream, start_traced: StartTraced
) -> None:
    """In the OpenMetrics exposition, mend_errors_total's exemplar and a latency bucket's name
    the trace of the request."""
    traced = await start_traced(await start_upstream({"GET /boom": fail}))
    await traced.mend.client.get("/boom", headers={"traceparent": AGENT_PARENT})
    exposition = await traced.scrape()
    errors = [line for line in exposition.splitlines() if line.startswith("mend_errors_total{")]
    buckets = [
        line
        for line in exposition.splitlines()
        if line.startswith("mend_request_duration_seconds_bucket{") and " # {" in line
    ]
    assert len(errors) == 1
    assert f'trace_id="{AGENT_TRACE}"' in errors[0].split(" # ", 1)[1]
    assert len(buckets) == 1
    assert f'trace_id="{AGENT_TRACE}"' in buckets[0]


async def test_an_unsampled_trace_is_no_exemplar(
    start_upstream: StartUpstream, start_traced: StartTraced
) -> None:
    """A trace the sampler dropped is named by no exemplar (there is no trace to open)."""
    env = {"OTEL_TRACES_SAMPLER": "always_off"}
    traced = await start_traced(await start_upstream({"GET /boom": fail}), env=env)
    await traced.mend.client.get("/boom", headers={"traceparent": AGENT_PARENT})
    exposition = await traced.scrape()
    assert "mend_errors_total{" in exposition
    assert "trace_id" not in exposition


@pytest.mark.slow
async def test_prometheus_keeps_the_trace_id_of_an_error(
    start_upstream: StartUpstream, receiver: Receiver, tmp_path: Path
) -> None:
    """A real Prometheus with exemplar storage (as docker-compose runs it) scraping mend's admin
    port returns, for mend_errors_total, an exemplar naming the failed request's trace."""
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.skip("prometheus is not installed; run scripts/install-system-deps as root")
    upstream = await start_upstream({"GET /boom": fail})
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
    async with mend_run(str(upstream.make_url("")), env) as running:
        config = {
            "global": {"scrape_interval": "1s"},
            "scrape_configs": [
                {"job_name": "mend", "static_configs": [{"targets": [running.admin[7:]]}]}
            ],
        }
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        prom_url = f"http://127.0.0.1:{free_port()}"
        prom = await asyncio.create_subprocess_exec(
            prometheus,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address={prom_url[7:]}",
            "--enable-feature=exemplar-storage",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            async with aiohttp.ClientSession() as client:
                sent = {"traceparent": AGENT_PARENT}
                async with client.get(f"{running.url}/boom", headers=sent) as answer:
                    assert answer.status == 500
                found = await _exemplar_trace_ids(client, prom_url, "mend_errors_total")
        finally:
            prom.send_signal(signal.SIGTERM)
            async with asyncio.timeout(30):
                await prom.wait()
    assert found == {AGENT_TRACE}


async def _exemplar_trace_ids(client: aiohttp.ClientSession, prom: str, metric: str) -> set[str]:
    """The trace ids of ``metric``'s exemplars, once Prometheus has some (30 s at most)."""
    now = time.time()
    query = {"query": metric, "start": str(now - 600), "end": str(now + 600)}
    async with asyncio.timeout(30):
        while True:
            try:
                async with client.get(f"{prom}/api/v1/query_exemplars", params=query) as reply:
                    data = (await reply.json())["data"] if reply.status == 200 else []
            except aiohttp.ClientConnectionError:
                data = []
            found = {
                exemplar["labels"]["trace_id"]
                for series in data
                for exemplar in series["exemplars"]
                if "trace_id" in exemplar["labels"]
            }
            if found:
                return found
            await asyncio.sleep(0.5)


def test_the_error_panel_shows_exemplars_that_open_the_trace() -> None:
    """The dashboard's "Errors by code" query asks for exemplars, and the provisioned
    Prometheus data source links their trace_id label to a trace."""
    dashboard = json.loads((ROOT / "grafana" / "dashboards" / "mend.json").read_text())
    panel = next(p for p in dashboard["panels"] if p.get("title") == "Errors by code")
    assert [target.get("exemplar") for target in panel["targets"]] == [True]
    source = yaml.safe_load(
        (ROOT / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
    )
    links = source["datasources"][0]["jsonData"]["exemplarTraceIdDestinations"]
    assert [link["name"] for link in links] == ["trace_id"]
