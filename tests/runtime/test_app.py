"""End to end through the proxy: real upstreams on loopback, real HTTP, no mocks."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import socket
import zlib
from typing import Any

import brotli
import pytest
from aiohttp import web

import proxy.policy.evaluate
import proxy.runtime.app
from proxy.config.choices import ProtocolName
from proxy.config.route import Route
from tests.conftest import StartMend, StartUpstream

JAVA_TRACE = (
    "java.lang.IllegalStateException: Order repository failed\n"
    "\tat com.acme.orders.OrderService.save(OrderService.java:42)\n"
    "\tat org.springframework.web.servlet.FrameworkServlet.service(FrameworkServlet.java:897)\n"
)
SPRING_500 = {
    "timestamp": "2024-05-01T10:00:00.000+00:00",
    "status": 500,
    "error": "Internal Server Error",
    "trace": JAVA_TRACE,
    "message": "Order repository failed",
    "path": "/api/orders",
}
FASTAPI_422 = {
    "detail": [
        {
            "type": "greater_than",
            "loc": ["body", "qty"],
            "msg": "Input should be greater than 0",
            "input": -1,
            "ctx": {"gt": 0},
        },
        {"type": "missing", "loc": ["body", "items", 0, "sku"], "msg": "Field required"},
    ]
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def json_handler(status: int, body: Any, **headers: str) -> web.Response:
    return web.json_response(body, status=status, headers=headers)


async def test_success_passes_through_unchanged(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A 200 keeps its status, body and end-to-end headers, and is not counted as an error."""

    async def ok(_: web.Request) -> web.Response:
        return web.json_response({"id": 7}, headers={"ETag": '"v1"', "X-Custom": "yes"})

    mend = await start_mend(await start_upstream({"/orders/7": ok}))
    resp = await mend.client.get("/orders/7")
    assert resp.status == 200
    assert await resp.json() == {"id": 7}
    assert resp.headers["ETag"] == '"v1"'
    assert resp.headers["X-Custom"] == "yes"
    assert "X-Error-Code" not in resp.headers
    assert mend.metric("mend_requests_total", route="default", outcome="passthrough") == 1


async def test_spring_500_becomes_envelope_without_trace(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A Spring 500 with a Java trace: envelope, echoed request id, no frame anywhere."""

    async def boom(_: web.Request) -> web.Response:
        return await json_handler(
            500, SPRING_500, Server="Apache-Tomcat/9.0.83", **{"X-Powered-By": "Servlet/4.0"}
        )

    mend = await start_mend(await start_upstream({"/api/orders": boom}))
    resp = await mend.client.post("/api/orders", json={}, headers={"X-Request-ID": "agent-42"})
    text = await resp.text()
    assert resp.status == 500
    error = json.loads(text)["error"]
    assert error["code"] == "INTERNAL_ERROR"
    assert error["action"] == "report_bug"
    assert error["retryable"] is False
    assert error["request_id"] == "agent-42"
    assert error["upstream_status"] == 500
    assert resp.headers["X-Request-ID"] == "agent-42"
    assert resp.headers["X-Error-Code"] == "INTERNAL_ERROR"
    everything = text + json.dumps(dict(resp.headers))
    assert resp.headers["Vary"] == "Accept"
    for leaked in (
        "OrderService",
        "java.lang",
        "springframework",
        "Tomcat",
        "Servlet/4.0",
        "aiohttp",
    ):
        assert leaked not in everything


async def test_rate_limit_reads_retry_after(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A 429 with Retry-After: 7 is retryable after 7000 ms and keeps Retry-After: 7."""

    async def limited(_: web.Request) -> web.Response:
        return web.Response(status=429, text="slow down", headers={"Retry-After": "7"})

    mend = await start_mend(await start_upstream({"/search": limited}))
    resp = await mend.client.get("/search")
    error = (await resp.json())["error"]
    assert resp.status == 429
    assert (error["code"], error["retryable"], error["retry_after_ms"]) == (
        "RATE_LIMITED",
        True,
        7000,
    )
    assert error["action"] == "retry"
    assert resp.headers["Retry-After"] == "7"


async def test_fastapi_422_names_fields_by_pointer(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """Every FastAPI ``loc`` becomes a JSON pointer, with what was received and what is allowed."""

    async def invalid(_: web.Request) -> web.Response:
        return await json_handler(422, FASTAPI_422)

    mend = await start_mend(await start_upstream({"/api/orders": invalid}))
    error = (await (await mend.client.post("/api/orders", json={"qty": -1})).json())["error"]
    assert error["code"] == "VALIDATION_FAILED"
    assert error["field"] == "/qty"
    assert [f["field"] for f in error["invalid_fields"]] == ["/qty", "/items/0/sku"]
    assert error["invalid_fields"][0]["received"] == -1
    assert error["invalid_fields"][0]["allowed_values"] == {"exclusiveMinimum": 0}
    assert error["suggested_value"] == 1


async def test_dead_upstream_is_unreachable(start_mend: StartMend) -> None:
    """Nothing listening: UPSTREAM_UNREACHABLE, upstream_status null, retryable."""
    mend = await start_mend(f"http://127.0.0.1:{free_port()}")
    resp = await mend.client.get("/anything")
    error = (await resp.json())["error"]
    assert resp.status == 502
    assert error["code"] == "UPSTREAM_UNREACHABLE"
    assert error["upstream_status"] is None
    assert error["retryable"] is True
    assert mend.metric("mend_upstream_failures_total", route="default", reason="unreachable") == 1


async def test_slow_upstream_times_out_with_write_warning(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A read timeout after a POST is UPSTREAM_TIMEOUT, not retryable: it may have taken effect."""

    async def slow(_: web.Request) -> web.Response:
        await asyncio.sleep(2)
        return web.Response(text="late")

    mend = await start_mend(await start_upstream({"/slow": slow}), route={"read_timeout": 0.2})
    error = (await (await mend.client.post("/slow", data=b"x")).json())["error"]
    assert error["code"] == "UPSTREAM_TIMEOUT"
    assert (error["retryable"], error["applied"]) == (False, "unknown")
    assert "may already have taken effect" in error["hint"]


async def test_idempotency_key_removes_write_warning(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """With an Idempotency-Key the retry is safe, so no warning."""

    async def gateway(_: web.Request) -> web.Response:
        return web.Response(status=502, text="bad gateway")

    mend = await start_mend(await start_upstream({"/pay": gateway}))
    resp = await mend.client.post("/pay", data=b"{}", headers={"Idempotency-Key": "k1"})
    error = (await resp.json())["error"]
    assert error["code"] == "BAD_GATEWAY"
    assert "may already have taken effect" not in error["hint"]


async def test_garbage_response_is_protocol_error(start_mend: StartMend) -> None:
    """An upstream that answers with non-HTTP bytes gives UPSTREAM_PROTOCOL_ERROR."""

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1024)
        writer.write(b"THIS IS NOT HTTP\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(garbage, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        mend = await start_mend(f"http://127.0.0.1:{port}")
        error = (await (await mend.client.get("/x")).json())["error"]
    assert error["code"] == "UPSTREAM_PROTOCOL_ERROR"


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("br", brotli.compress),
    ],
)
async def test_compressed_error_bodies_are_read(
    start_upstream: StartUpstream, start_mend: StartMend, encoding: str, compress: Any
) -> None:
    """Error bodies in gzip, deflate and br are decompressed before rules look at them."""

    async def invalid(_: web.Request) -> web.Response:
        return web.Response(
            status=422,
            body=compress(json.dumps(FASTAPI_422).encode()),
            headers={"Content-Encoding": encoding, "Content-Type": "application/json"},
        )

    mend = await start_mend(await start_upstream({"/v": invalid}))
    error = (await (await mend.client.post("/v", json={})).json())["error"]
    assert error["rule"] == "fastapi.validation"
    assert error["field"] == "/qty"


async def test_oversized_error_body_still_gets_envelope(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A 5 MB error body over a 64 KiB cap is cut, and the agent still gets an envelope."""

    async def huge(_: web.Request) -> web.Response:
        return web.Response(status=503, body=b"x" * (5 << 20))

    mend = await start_mend(await start_upstream({"/h": huge}), error_body_max_bytes=65536)
    resp = await mend.client.get("/h")
    assert resp.status == 503
    assert (await resp.json())["error"]["code"] == "SERVICE_UNAVAILABLE"


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"X-Request-ID": "abc-123"}, "abc-123"),
        (
            {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
            "4bf92f3577b34da6a3ce929d0e0e4736",
        ),
    ],
)
async def test_request_id_is_forwarded_upstream(
    start_upstream: StartUpstream, start_mend: StartMend, headers: dict[str, str], expected: str
) -> None:
    """The upstream sees the same request id the envelope and the log carry."""
    seen: list[str] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(request.headers["X-Request-ID"])
        return web.Response(status=404)

    mend = await start_mend(await start_upstream({"/r": record}))
    resp = await mend.client.get("/r", headers=headers)
    assert seen == [expected]
    assert (await resp.json())["error"]["request_id"] == expected
    assert [line["request_id"] for line in mend.log_lines() if line["event"] == "request"] == [
        expected
    ]


async def test_hop_by_hop_headers_are_dropped_and_forwarded_set(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """Connection-named and hop-by-hop headers stop at mend; X-Forwarded-* are added."""
    seen: dict[str, str] = {}

    async def record(request: web.Request) -> web.Response:
        seen.update(request.headers)
        return web.Response(text="ok", headers={"Keep-Alive": "timeout=5", "X-Kept": "1"})

    mend = await start_mend(await start_upstream({"/h": record}))
    resp = await mend.client.get(
        "/h",
        headers={"Connection": "keep-alive, X-Secret-Hop", "X-Secret-Hop": "1", "TE": "trailers"},
    )
    assert "X-Secret-Hop" not in seen
    assert "TE" not in seen
    assert seen["X-Forwarded-For"] == "127.0.0.1"
    assert seen["X-Forwarded-Proto"] == "http"
    assert "Keep-Alive" not in resp.headers
    assert resp.headers["X-Kept"] == "1"


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_upstream_gets_no_headers_the_agent_did_not_send(
    start_upstream: StartUpstream, start_mend: StartMend, method: str
) -> None:
    """No User-Agent, Accept, Accept-Encoding or Content-Type of aiohttp's own is added."""
    seen: list[dict[str, str]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.Response(text="ok")

    mend = await start_mend(await start_upstream({"/h": record}))
    resp = await mend.client.request(
        method,
        "/h",
        data=b"raw bytes" if method == "POST" else None,
        skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
    )
    assert resp.status == 200
    added = {"User-Agent", "Accept", "Accept-Encoding", "Content-Type"} & set(seen[0])
    assert added == set()
    # what the agent does send still arrives
    resp = await mend.client.request(
        method, "/h", headers={"User-Agent": "agent/1", "Accept": "application/json"}
    )
    assert (seen[1]["User-Agent"], seen[1]["Accept"]) == ("agent/1", "application/json")


@pytest.mark.parametrize("method", ["HEAD", "GET"])
async def test_head_and_no_content(
    start_upstream: StartUpstream, start_mend: StartMend, method: str
) -> None:
    """HEAD and 204 carry no body; 304 passes through as a 304."""

    async def empty(_: web.Request) -> web.Response:
        return web.Response(status=204)

    async def not_modified(_: web.Request) -> web.Response:
        return web.Response(status=304, headers={"ETag": '"v"'})

    mend = await start_mend(await start_upstream({"/e": empty, "/n": not_modified}))
    resp = await mend.client.request(method, "/e")
    assert (resp.status, await resp.read()) == (204, b"")
    resp = await mend.client.request(method, "/n")
    assert resp.status == 304
    assert resp.headers["ETag"] == '"v"'


async def test_absolute_form_target_is_refused(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """mend is never an open proxy: an absolute-form target gets an envelope, not a fetch."""
    called: list[str] = []

    async def record(request: web.Request) -> web.Response:
        called.append(request.path)
        return web.Response(text="ok")

    mend = await start_mend(await start_upstream({"/{tail:.*}": record}))
    host, port = mend.client.host, mend.client.port
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n"
    )
    await writer.drain()
    raw = await reader.read()
    writer.close()
    assert b"FORWARD_PROXY_REFUSED" in raw
    assert called == []


async def test_request_too_large_is_refused_before_upstream(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A declared body over the limit gets REQUEST_TOO_LARGE (413) and never reaches upstream."""
    called: list[int] = []

    async def record(request: web.Request) -> web.Response:
        called.append(1)
        return web.Response(text="ok")

    mend = await start_mend(await start_upstream({"/u": record}), request_body_max_bytes=1024)
    resp = await mend.client.post("/u", data=b"x" * 4096)
    assert resp.status == 413
    assert (await resp.json())["error"]["code"] == "REQUEST_TOO_LARGE"
    assert called == []


async def test_large_upload_and_download_stream_byte_identical(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """20 MB up and down pass through unchanged (same sha256)."""
    payload = bytes(range(256)) * (20 * 4096)

    async def echo_hash(request: web.Request) -> web.Response:
        digest = hashlib.sha256()
        async for chunk in request.content.iter_any():
            digest.update(chunk)
        return web.Response(text=digest.hexdigest())

    async def download(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Length": str(len(payload))})
        await resp.prepare(request)
        for start in range(0, len(payload), 1 << 20):
            await resp.write(payload[start : start + (1 << 20)])
        return resp

    mend = await start_mend(await start_upstream({"POST /up": echo_hash, "GET /down": download}))
    up = await mend.client.post("/up", data=payload)
    assert await up.text() == hashlib.sha256(payload).hexdigest()
    down = await mend.client.get("/down")
    assert hashlib.sha256(await down.read()).hexdigest() == hashlib.sha256(payload).hexdigest()


async def test_graphql_errors_in_200_only_where_route_asks(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """On a plain-HTTP route a 2xx is inspected only where success_rules name the rule."""

    async def graphql(_: web.Request) -> web.Response:
        return web.json_response({"data": None, "errors": [{"message": "Cannot query field"}]})

    rules = "tests/data/graphql_rule.yaml"
    upstream = await start_upstream({"/graphql": graphql, "/other": graphql})
    url = str(upstream.make_url("/")).rstrip("/")
    routes = (
        Route(
            name="gql",
            prefix="/graphql",
            upstream=url,
            success_rules=("test.graphql",),
            rules=(rules,),
            protocol=ProtocolName.HTTP,
        ),
        Route(name="plain", prefix="/", upstream=url, rules=(rules,), protocol=ProtocolName.HTTP),
    )
    mend = await start_mend(url, routes=routes)
    inspected = await mend.client.post("/graphql", json={"query": "{x}"})
    assert inspected.headers["X-Error-Code"] == "GRAPHQL_ERROR"
    untouched = await mend.client.post("/other", json={"query": "{x}"})
    assert "X-Error-Code" not in untouched.headers
    assert (await untouched.json())["errors"][0]["message"] == "Cannot query field"


async def test_status_200_mode_keeps_upstream_status_visible(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A route with status 200 answers 200 and says the original status in body and header."""

    async def missing(_: web.Request) -> web.Response:
        return web.Response(status=404)

    mend = await start_mend(await start_upstream({"/m": missing}), route={"status": 200})
    resp = await mend.client.get("/m")
    assert resp.status == 200
    assert resp.headers["X-Upstream-Status"] == "404"
    assert (await resp.json())["error"]["upstream_status"] == 404


async def test_metrics_count_each_code(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """mend_errors_total counts envelopes by code, and fallbacks count as unmatched."""

    async def missing(_: web.Request) -> web.Response:
        return web.Response(status=404)

    mend = await start_mend(await start_upstream({"/m": missing}))
    for _ in range(3):
        await mend.client.get("/m")
    labels = {
        "code": "RESOURCE_NOT_FOUND",
        "category": "not_found",
        "route": "default",
        "upstream_status": "404",
        "rule": "fallback.404",
        "protocol": "http",
    }
    assert mend.metric("mend_errors_total", **labels) == 3
    assert mend.metric("mend_unmatched_errors_total", route="default", upstream_status="404") == 3


async def test_log_line_masks_secrets_in_raw_body(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """The operator log keeps the raw body keyed by request id, with secrets masked."""

    async def leak(_: web.Request) -> web.Response:
        return web.Response(status=500, text="db error password=hunter2secret at Foo.java:1")

    mend = await start_mend(await start_upstream({"/l": leak}))
    await mend.client.get("/l", headers={"X-Request-ID": "log-1"})
    (line,) = [line for line in mend.log_lines() if line.get("request_id") == "log-1"]
    assert line["code"] == "INTERNAL_ERROR"
    assert "db error" in line["upstream_body"]
    assert "hunter2secret" not in line["upstream_body"]


async def test_a_bug_in_mend_still_gives_an_envelope(
    start_upstream: StartUpstream, start_mend: StartMend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception inside mend becomes PROXY_INTERNAL_ERROR, never a bare aiohttp 500 page."""
    real = proxy.policy.evaluate.rewrite
    calls: list[int] = []

    def broken_once(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("simulated bug")
        return real(*args, **kwargs)

    async def missing(_: web.Request) -> web.Response:
        return web.Response(status=404)

    monkeypatch.setattr(
        proxy.policy.evaluate, "rewrite", broken_once
    )  # where upstream errors are built
    mend = await start_mend(await start_upstream({"/m": missing}))
    resp = await mend.client.get("/m")
    assert resp.status == 500
    error = (await resp.json())["error"]
    assert error["code"] == "PROXY_INTERNAL_ERROR"
    assert "simulated bug" not in json.dumps(error)
    assert any(line["event"] == "mend_bug" for line in mend.log_lines())


async def test_connect_is_refused_with_an_envelope(start_mend: StartMend) -> None:
    """CONNECT (authority-form) gets FORWARD_PROXY_REFUSED, not a tunnel and not a plain 404."""
    mend = await start_mend(f"http://127.0.0.1:{free_port()}")
    reader, writer = await asyncio.open_connection(mend.client.host, mend.client.port)
    writer.write(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(4096), 5)
    writer.close()
    assert b"FORWARD_PROXY_REFUSED" in raw
    assert mend.metric("mend_upstream_failures_total", route="none", reason="refused") == 0


async def test_method_not_allowed_lists_allowed_methods(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A 405's Allow header becomes allowed_values, and the header is kept."""

    async def only_get(_: web.Request) -> web.Response:
        return web.Response(status=405, headers={"Allow": "GET, HEAD"})

    mend = await start_mend(await start_upstream({"/r": only_get}))
    resp = await mend.client.delete("/r")
    error = (await resp.json())["error"]
    assert error["code"] == "METHOD_NOT_ALLOWED"
    assert error["allowed_values"] == ["GET", "HEAD"]
    assert resp.headers["Allow"] == "GET, HEAD"
