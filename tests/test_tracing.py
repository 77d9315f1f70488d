"""Traces: mend's spans as a real OTLP/HTTP receiver decodes them (CONTRACT §10).

mend runs with the OpenTelemetry SDK and its OTLP/HTTP exporter, configured by ``OTEL_*``
variables or a ``tracing:`` block; the receiver (``tests/otlp_receiver.py``) decodes what it
sends with ``opentelemetry-proto``. Upstreams are real aiohttp and FastMCP servers.
"""

from __future__ import annotations

import io
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from proxy import tracing
from proxy.app import create_app
from proxy.logs import make_logger
from proxy.settings import Route, Settings
from proxy.tracing import TracingSettings
from tests.conftest import Mend, MendTestServer, StartUpstream
from tests.otlp_receiver import CLIENT, ERROR, SERVER, UNSET, Receiver, app

AGENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
AGENT_SPAN = "00f067aa0ba902b7"
AGENT_PARENT = f"00-{AGENT_TRACE}-{AGENT_SPAN}-01"


@dataclass
class Traced:
    """mend with a tracer exporting to ``receiver``."""

    mend: Mend
    receiver: Receiver


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
        return Traced(Mend(client, registry, log), receiver)

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
    from tests.test_app import free_port  # noqa: PLC0415

    traced = await start_traced(f"http://127.0.0.1:{free_port()}")
    response = await traced.mend.client.get("/x")
    code = (await response.json())["error"]["code"]
    await traced.receiver.wait(2)
    server, client = traced.receiver.one(SERVER), traced.receiver.one(CLIENT)
    assert (server.status, server.attributes["error.type"]) == (ERROR, code)
    assert code == "UPSTREAM_UNREACHABLE"
    assert client.status == ERROR
    assert "Connect" in client.attributes["error.type"]


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
    assert tracing.resolve(TracingSettings(), {"OTEL_SERVICE_NAME": "x"}) is None


def test_sdk_disabled_turns_tracing_off() -> None:
    """OTEL_SDK_DISABLED=true wins over an endpoint."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"}
    assert tracing.resolve(TracingSettings(), env) is None


def test_the_traces_endpoint_wins_over_the_base_endpoint() -> None:
    """OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is used as is; the base one gets /v1/traces."""
    base = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}
    both = {**base, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://other:4318/t"}
    first = tracing.resolve(TracingSettings(), base)
    second = tracing.resolve(TracingSettings(), both)
    assert first is not None
    assert first.endpoint == "http://collector:4318/v1/traces"
    assert second is not None
    assert second.endpoint == "http://other:4318/t"


@pytest.mark.parametrize("protocol", ["grpc", "http/json"])
def test_a_protocol_other_than_http_protobuf_is_refused(protocol: str) -> None:
    """OTEL_EXPORTER_OTLP_PROTOCOL other than http/protobuf: an error naming the variable."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": protocol}
    with pytest.raises(tracing.TracingError, match="OTEL_EXPORTER_OTLP_PROTOCOL"):
        tracing.resolve(TracingSettings(), env)


def test_an_unknown_sampler_is_refused() -> None:
    """OTEL_TRACES_SAMPLER must be one the SDK knows: no silent fallback."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_SAMPLER": "sometimes"}
    with pytest.raises(tracing.TracingError, match="sometimes"):
        tracing.resolve(TracingSettings(), env)


def test_an_endpoint_that_is_not_http_is_refused() -> None:
    """An endpoint must be an http(s) URL."""
    with pytest.raises(tracing.TracingError, match="OTEL_EXPORTER_OTLP_ENDPOINT"):
        tracing.resolve(TracingSettings(), {"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"})
