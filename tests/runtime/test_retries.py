"""Retries with real upstreams (issue 41, docs/retries.md): what mend sends again, and what not.

One real mend process (``mend run --config``) serves a route per retry policy; behind it a real
aiohttp API (``retry_upstream.py``) scripted per test to refuse nothing but answer 503 or 429
(with and without a stated wait), reset after reading the request, or hang, N times before it
succeeds; and a small MCP server (``retry_mcp_upstream.py``) whose tool calls reset the first
time. The requests go with httpx, the MCP ones with the official SDK's client. Every test uses
paths (or tags) of its own, so that the upstream's counts and mend's metrics are its own; each
asserts what the upstream saw (exactly the tries the policy allows, never a second POST without
a key) and what the agent got (the success untouched, or the envelope with its attempts).
"""

from __future__ import annotations

import http.server
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
from mcp import Client

from tests.hostile.procs import (
    ROOT,
    MendProcess,
    body_of,
    free_port,
    mend_process,
    module_server,
    raw_exchange,
    status_of,
)
from tests.runtime.retry_upstream import counter, hits, script

#: a policy that retries everything the envelope may call retryable, quickly
FAST: dict[str, Any] = {
    "attempts": 3,
    "retry_on": ["connect-failure", "reset", "timeout", 503, 429],
    "back_off": {"base_ms": 10, "max_ms": 40},
    "per_try_timeout": 0.5,
}
#: seconds from a request's arrival within which all its tries end (the routes' read_timeout)
DEADLINE = 5.0
#: the deadline route's: tries of 0.4 s within 1 s
SHORT_DEADLINE = 1.0


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    """The scriptable API, as a process of its own, stopped by its PID."""
    with module_server("tests.runtime.retry_upstream", ROOT) as url:
        yield url


@pytest.fixture(scope="module")
def mcp_upstream() -> Iterator[str]:
    """The MCP server, as a process of its own, stopped by its PID."""
    with module_server("tests.runtime.retry_mcp_upstream", ROOT) as url:
        yield url


@pytest.fixture(scope="module")
def refused_port() -> int:
    """A port nothing listens on (until ``test_refused_connection...`` starts a listener)."""
    return free_port()


@pytest.fixture(scope="module")
def mend(
    tmp_path_factory: pytest.TempPathFactory, upstream: str, mcp_upstream: str, refused_port: int
) -> Iterator[MendProcess]:
    """mend with a route per policy, each its own prefix (the upstream sees the whole path)."""

    def route(name: str, retries: dict[str, Any] | None, **more: Any) -> dict[str, Any]:
        config = {"name": name, "prefix": f"/{name}", "upstream": upstream, **more}
        config.setdefault("read_timeout", DEADLINE)
        return config if retries is None else {**config, "retries": retries}

    routes = [
        route("inherit", None, read_timeout=1.5),
        route("fast", FAST),
        route("counted", {**FAST, "attempt_count_header": True}),
        route("off", {"attempts": 1}),
        route("gateway", {**FAST, "retry_on": ["gateway-error"]}),
        route("safe", FAST, retry_safe=[{"operation": "POST /safe/search/**", "safe": True}]),
        route("small", {**FAST, "body_max_bytes": 16}),
        route(
            "deadline",
            {**FAST, "attempts": 10, "retry_on": ["timeout"], "per_try_timeout": 0.4},
            read_timeout=SHORT_DEADLINE,
        ),
        route(
            "refused",
            {"attempts": 10, "back_off": {"base_ms": 200, "max_ms": 800}},
            upstream=f"http://127.0.0.1:{refused_port}",
            read_timeout=10.0,
        ),
        route(
            "unreachable",
            {**FAST, "attempts": 4},
            upstream=f"http://127.0.0.1:{refused_port}",
        ),
        {
            "name": "mcp",
            "prefix": "/mcp",
            "upstream": mcp_upstream,
            "protocol": "mcp",
            "read_timeout": DEADLINE,
            "retries": FAST,
        },
    ]
    config = {
        "watch_rules": False,
        # every route's default; "inherit" has no policy of its own
        "retries": {"attempts": 3, "back_off": {"base_ms": 10, "max_ms": 40}},
        "routes": routes,
    }
    with mend_process(Path(tmp_path_factory.mktemp("retries")), config) as running:
        yield running


# -- helpers ------------------------------------------------------------------------------


def unique(route: str) -> str:
    """A path of ``route`` no other test uses."""
    return f"/{route}/{uuid.uuid4().hex[:12]}"


def send(
    mend: MendProcess,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    """One request to mend's agent port (a body is sent as JSON)."""
    sent = {"Content-Type": "application/json"} if body is not None else {}
    return httpx.request(
        method,
        f"http://127.0.0.1:{mend.port}{path}",
        content=body,
        headers={**sent, **(headers or {})},
        timeout=30,
    )


def envelope(response: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


BODY = b'{"sku": "SKU-1", "qty": 2}'
METHODS = ["GET", "PUT", "DELETE", "POST"]


def _body(method: str) -> bytes | None:
    return BODY if method in ("PUT", "POST") else None


# -- statuses that say "not processed": any method ------------------------------------------


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("status", ["503", "429"])
def test_status_without_a_stated_wait_is_retried_until_success(
    mend: MendProcess, upstream: str, method: str, status: str
) -> None:
    """A 503 or 429 with no Retry-After, twice, then 200: with 3 attempts the agent gets the
    200 and the upstream saw three tries, for every method (the upstream said it did not
    process the request), each with the same body."""
    path = unique("fast")
    script(upstream, path, 2, status)
    response = send(mend, method, path, _body(method))
    assert response.status_code == 200, response.text
    assert response.json() == {"ok": True, "method": method, "path": path}
    seen = hits(upstream, path)
    assert [h["answer"] for h in seen] == [status, status, "200"]
    assert {h["method"] for h in seen} == {method}
    assert {h["body"] for h in seen} == {(_body(method) or b"").decode()}


@pytest.mark.parametrize("method", METHODS)
def test_short_retry_after_is_waited_then_retried(
    mend: MendProcess, upstream: str, method: str
) -> None:
    """A 429 stating a wait of 0.3 s (under retry_after_max_ms, 1 s): mend waits it, then sends
    again; the upstream's second try comes at least that long after the first."""
    path = unique("fast")
    script(upstream, path, 1, "429-after:0.3")
    response = send(mend, method, path, _body(method))
    assert response.status_code == 200, response.text
    first, second = hits(upstream, path)
    assert second["t0"] - first["t1"] >= 0.3 * 0.9


def test_short_retry_after_on_a_503_is_waited_then_retried(
    mend: MendProcess, upstream: str
) -> None:
    """A 503 stating a wait of 0.2 s: waited, then retried, for a POST without a key."""
    path = unique("fast")
    script(upstream, path, 1, "503-after:0.2")
    response = send(mend, "POST", path, BODY)
    assert response.status_code == 200, response.text
    first, second = hits(upstream, path)
    assert second["t0"] - first["t1"] >= 0.2 * 0.9


@pytest.mark.parametrize(("stated", "wait_s"), [("429-reset:1", 1.0), ("429-body:0.3", 0.3)])
def test_a_wait_stated_by_a_rate_limit_reset_or_the_body_is_waited(
    mend: MendProcess, upstream: str, stated: str, wait_s: float
) -> None:
    """A 429 whose wait is stated by ``RateLimit-Reset: 1`` or by ``retry_after_ms`` in its
    body (both within retry_after_max_ms): mend waits it before the second try."""
    path = unique("fast")
    script(upstream, path, 1, stated)
    response = send(mend, "GET", path)
    assert response.status_code == 200, response.text
    first, second = hits(upstream, path)
    assert second["t0"] - first["t1"] >= wait_s * 0.9


@pytest.mark.parametrize("status", ["503", "429"])
def test_long_retry_after_is_answered_at_once_with_its_wait(
    mend: MendProcess, upstream: str, status: str
) -> None:
    """A stated wait of 30 s (over retry_after_max_ms): no retry; the agent gets the envelope at
    once with that wait, no attempts member, and the upstream saw one request."""
    path = unique("fast")
    script(upstream, path, 5, f"{status}-after:30")
    declined = counter(mend, "mend_retries_declined_total", route="fast", why="wait")
    started = time.monotonic()
    response = send(mend, "GET", path)
    assert time.monotonic() - started < 10  # not 30 s of waiting
    assert response.status_code == int(status)
    error = envelope(response)
    assert error["retryable"] is True
    assert error["retry_after_ms"] >= 29_000
    assert "attempts" not in error or error["attempts"] is None
    assert len(hits(upstream, path)) == 1
    assert counter(mend, "mend_retries_declined_total", route="fast", why="wait") == declined + 1


# -- resets and hangs: only what is safe to send again ---------------------------------------


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_reset_after_the_request_is_retried_for_idempotent_methods(
    mend: MendProcess, upstream: str, method: str
) -> None:
    """The upstream reads the whole request then aborts the connection, once: an idempotent
    request is sent again and the agent gets the 200."""
    path = unique("fast")
    script(upstream, path, 1, "reset")
    labels = {"route": "fast", "reason": "reset", "outcome": "succeeded"}
    before = counter(mend, "mend_retries_total", **labels)
    response = send(mend, method, path, _body(method))
    assert response.status_code == 200, response.text
    assert [h["answer"] for h in hits(upstream, path)] == ["reset", "200"]
    assert counter(mend, "mend_retries_total", **labels) == before + 1


def test_reset_of_a_post_without_key_is_never_sent_twice(mend: MendProcess, upstream: str) -> None:
    """A POST without Idempotency-Key reset after it was read: the upstream sees exactly one
    POST; the agent gets the envelope saying it may have been applied (applied "unknown", not
    retryable); the retry is declined as unsafe."""
    path = unique("fast")
    script(upstream, path, 1, "reset")
    declined = counter(mend, "mend_retries_declined_total", route="fast", why="unsafe")
    response = send(mend, "POST", path, BODY)
    error = envelope(response)
    assert (error["applied"], error["retryable"]) == ("unknown", False), error
    assert "attempts" not in error or error["attempts"] is None
    assert len(hits(upstream, path)) == 1
    assert counter(mend, "mend_retries_declined_total", route="fast", why="unsafe") > declined


def test_reset_of_a_post_with_key_is_retried_with_the_same_key(
    mend: MendProcess, upstream: str
) -> None:
    """A POST carrying an Idempotency-Key, reset once: sent again with the same key and body;
    the agent gets the 200."""
    path = unique("fast")
    script(upstream, path, 1, "reset")
    key = str(uuid.uuid4())
    response = send(mend, "POST", path, BODY, {"Idempotency-Key": key})
    assert response.status_code == 200, response.text
    seen = hits(upstream, path)
    assert [h["answer"] for h in seen] == ["reset", "200"]
    assert [h["idempotency_key"] for h in seen] == [key, key]
    assert [h["body"] for h in seen] == [BODY.decode()] * 2


def test_hang_is_retried_for_a_get_at_the_per_try_timeout(mend: MendProcess, upstream: str) -> None:
    """No answer to the first GET within per_try_timeout (0.5 s): a second try is sent, well
    within the deadline, and its 200 reaches the agent."""
    path = unique("fast")
    script(upstream, path, 1, "hang")
    labels = {"route": "fast", "reason": "timeout", "outcome": "succeeded"}
    before = counter(mend, "mend_retries_total", **labels)
    started = time.monotonic()
    response = send(mend, "GET", path)
    assert response.status_code == 200, response.text
    assert time.monotonic() - started < DEADLINE
    assert [h["answer"] for h in hits(upstream, path)] == ["hang", "200"]
    assert counter(mend, "mend_retries_total", **labels) == before + 1


def test_hang_of_a_post_without_key_is_not_retried(mend: MendProcess, upstream: str) -> None:
    """A POST without a key that gets no answer within the try's timeout: one POST upstream,
    and the agent's envelope says it may have been applied."""
    path = unique("fast")
    script(upstream, path, 1, "hang")
    response = send(mend, "POST", path, BODY)
    error = envelope(response)
    assert error["code"] == "UPSTREAM_TIMEOUT"
    assert (error["applied"], error["retryable"]) == ("unknown", False)
    assert len(hits(upstream, path)) == 1


def test_hang_of_a_post_with_key_is_retried(mend: MendProcess, upstream: str) -> None:
    """A keyed POST that hangs once is sent again with the same key."""
    path = unique("fast")
    script(upstream, path, 1, "hang")
    key = str(uuid.uuid4())
    response = send(mend, "POST", path, BODY, {"Idempotency-Key": key})
    assert response.status_code == 200, response.text
    assert [h["idempotency_key"] for h in hits(upstream, path)] == [key, key]


def test_timeout_is_not_retried_unless_retry_on_names_it(mend: MendProcess, upstream: str) -> None:
    """The default retry_on (connect-failure, reset, 503, 429) has no timeout: a hung GET on a
    route with the top-level policy is answered UPSTREAM_TIMEOUT after one try."""
    path = unique("inherit")
    script(upstream, path, 1, "hang")
    response = send(mend, "GET", path)
    assert envelope(response)["code"] == "UPSTREAM_TIMEOUT"
    assert len(hits(upstream, path)) == 1


@pytest.mark.parametrize("status", ["502", "504"])
def test_gateway_errors_are_retried_only_for_idempotent_requests(
    mend: MendProcess, upstream: str, status: str
) -> None:
    """``retry_on: [gateway-error]``: a 502 or 504 (the request may have been processed) once,
    then 200: a GET is sent again and gets the 200; a POST without a key is not (one POST
    upstream, the agent gets the error)."""
    get, post = unique("gateway"), unique("gateway")
    script(upstream, get, 1, status)
    script(upstream, post, 1, status)
    assert send(mend, "GET", get).status_code == 200
    assert len(hits(upstream, get)) == 2
    assert send(mend, "POST", post, BODY).status_code == int(status)
    assert len(hits(upstream, post)) == 1


def test_a_success_cut_mid_body_is_not_sent_again(mend: MendProcess, upstream: str) -> None:
    """A 200 whose connection resets after part of its body, for a GET: the agent had begun to
    receive it, so mend does not send the request again (one request upstream); the agent sees
    the body cut short."""
    path = unique("fast")
    script(upstream, path, 1, "cut")
    with pytest.raises(httpx.HTTPError):
        send(mend, "GET", path)
    time.sleep(0.3)  # a retry, if mend made one, would have reached the upstream by now
    assert len(hits(upstream, path)) == 1


def test_route_retry_safe_entry_makes_a_post_retriable(mend: MendProcess, upstream: str) -> None:
    """A route's ``retry_safe: [{operation: "POST /safe/search/**", safe: true}]``: a reset POST
    to that path is sent again without a key; a POST elsewhere on the route is not."""
    named = f"/safe/search/{uuid.uuid4().hex[:12]}"
    other = unique("safe")
    script(upstream, named, 1, "reset")
    script(upstream, other, 1, "reset")
    assert send(mend, "POST", named, BODY).status_code == 200
    assert [h["answer"] for h in hits(upstream, named)] == ["reset", "200"]
    assert envelope(send(mend, "POST", other, BODY))["applied"] == "unknown"
    assert len(hits(upstream, other)) == 1


# -- connection refused: nothing was sent -------------------------------------------------


class _Served(http.server.BaseHTTPRequestHandler):
    methods: list[str]
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.methods.append(self.command)
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")  # no pooled connection outlives the test
        self.end_headers()
        self.close_connection = True
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


def _refused_then_served(
    mend: MendProcess, port: int, after_s: float
) -> tuple[httpx.Response, list[str]]:
    """A POST to the ``refused`` route while ``port`` refuses connections, a server starting on
    it ``after_s`` after the request was sent; mend's answer and the methods that server got."""
    methods: list[str] = []
    handler = type("Served", (_Served,), {"methods": methods})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler, bind_and_activate=False)
    server.daemon_threads = True
    serving = threading.Event()

    def start() -> None:
        server.server_bind()
        server.server_activate()
        serving.set()
        server.serve_forever()

    timer = threading.Timer(after_s, start)
    timer.daemon = True
    timer.start()
    try:
        return send(mend, "POST", "/refused/orders", BODY), methods
    finally:
        timer.cancel()  # nothing to cancel once it started the server
        if serving.is_set():
            server.shutdown()
        server.server_close()


def test_refused_connection_is_retried_for_a_post(mend: MendProcess, refused_port: int) -> None:
    """The route's upstream port refuses connections until a server starts on it 0.1 s after
    the request is sent; mend (10 attempts, back-off up to 200, 400, then 800 ms: the tries
    span seconds) retries the POST without a key (nothing had been sent: applied "no") and the
    agent gets the 200; the server saw one POST (the refused tries never reached it) and mend
    counted connect_failure retries. On a machine so loaded that mend's first try came after
    the server started (no retry needed), the scenario is run again with the server starting
    0.4 s, then 1 s, after the request."""
    retried = 0.0
    for after_s in (0.1, 0.4, 1.0):
        before = counter(mend, "mend_retries_total", route="refused", reason="connect_failure")
        response, methods = _refused_then_served(mend, refused_port, after_s)
        assert response.status_code == 200, response.text
        assert methods == ["POST"]
        after = counter(mend, "mend_retries_total", route="refused", reason="connect_failure")
        retried = after - before
        if retried:
            break
    assert retried > 0


def test_refused_on_every_try_gives_the_envelope_with_its_attempts(mend: MendProcess) -> None:
    """Nothing ever listens: after its 4 attempts the POST gets UPSTREAM_UNREACHABLE, applied
    "no" (it never left), retryable, with ``attempts: {count: 4, ...}`` and a wait no shorter
    than the time spent."""
    response = send(mend, "POST", "/unreachable/orders", BODY)
    error = envelope(response)
    assert error["code"] == "UPSTREAM_UNREACHABLE", error
    assert (error["applied"], error["retryable"]) == ("no", True)
    assert error["attempts"]["count"] == 4
    assert error["retry_after_ms"] >= error["attempts"]["elapsed_ms"]


# -- attempts used up, and what shows ---------------------------------------------------------


def test_attempts_used_up_give_the_envelope_with_its_attempts(
    mend: MendProcess, upstream: str
) -> None:
    """503 on every try: after the 3 attempts the agent gets the 503 envelope with
    ``attempts: {count: 3, elapsed_ms}`` and a ``retry_after_ms`` no shorter than the time
    already spent; the upstream saw exactly 3 requests."""
    path = unique("fast")
    script(upstream, path, 99, "503")
    response = send(mend, "GET", path)
    assert response.status_code == 503
    error = envelope(response)
    assert error["retryable"] is True
    assert error["attempts"]["count"] == 3
    elapsed = error["attempts"]["elapsed_ms"]
    assert isinstance(elapsed, int)
    assert 0 <= elapsed < DEADLINE * 1000
    assert error["retry_after_ms"] >= elapsed
    assert int(response.headers["Retry-After"]) * 1000 >= error["retry_after_ms"] - 999
    assert len(hits(upstream, path)) == 3


def test_reset_on_every_try_gives_the_envelope_with_its_attempts(
    mend: MendProcess, upstream: str
) -> None:
    """A GET reset on every try: 3 requests upstream, then the envelope says it may have been
    applied, may be sent again, and was tried 3 times."""
    path = unique("fast")
    script(upstream, path, 99, "reset")
    error = envelope(send(mend, "GET", path))
    assert (error["applied"], error["retryable"]) == ("unknown", True), error
    assert error["attempts"]["count"] == 3
    assert len(hits(upstream, path)) == 3


def test_retried_success_passes_untouched_without_a_count_header(
    mend: MendProcess, upstream: str
) -> None:
    """A 200 after two 503s reaches the agent as the upstream sent it (its body, its own
    header) and nothing tells it a retry was made: no X-Mend-Attempt-Count by default."""
    path = unique("fast")
    script(upstream, path, 2, "503")
    response = send(mend, "GET", path)
    assert response.status_code == 200
    assert response.content == json.dumps({"ok": True, "method": "GET", "path": path}).encode()
    assert response.headers["X-Upstream"] == "retry-upstream"
    assert "X-Mend-Attempt-Count" not in response.headers


def test_attempt_count_header_when_turned_on(mend: MendProcess, upstream: str) -> None:
    """With ``attempt_count_header: true``, a 200 after two 503s carries X-Mend-Attempt-Count: 3,
    a first-try success X-Mend-Attempt-Count: 1, and the envelope after 3 failed tries 3."""
    retried, first = unique("counted"), unique("counted")
    script(upstream, retried, 2, "503")
    response = send(mend, "GET", retried)
    assert response.status_code == 200
    assert response.headers["X-Mend-Attempt-Count"] == "3"
    assert send(mend, "GET", first).headers["X-Mend-Attempt-Count"] == "1"
    failing = unique("counted")
    script(upstream, failing, 99, "503")
    used_up = send(mend, "GET", failing)
    assert used_up.status_code == 503
    assert used_up.headers["X-Mend-Attempt-Count"] == "3"


def test_retries_are_counted_in_the_metrics(mend: MendProcess, upstream: str) -> None:
    """Two 503s then 200: ``mend_retries_total{route, reason="status_503"}`` grows by 2, one
    retry failed (a 503 again) and one succeeded."""
    path = unique("fast")
    script(upstream, path, 2, "503")
    labels = {"route": "fast", "reason": "status_503"}
    failed = counter(mend, "mend_retries_total", outcome="failed", **labels)
    succeeded = counter(mend, "mend_retries_total", outcome="succeeded", **labels)
    assert send(mend, "GET", path).status_code == 200
    assert counter(mend, "mend_retries_total", outcome="failed", **labels) == failed + 1
    assert counter(mend, "mend_retries_total", outcome="succeeded", **labels) == succeeded + 1


def test_the_log_line_names_the_attempts(mend: MendProcess, upstream: str) -> None:
    """The request's log line (by its X-Request-ID) has ``"attempts": 3`` after two retries; a
    request answered at its first try has no attempts member (or 1)."""
    retried, once = unique("fast"), unique("fast")
    script(upstream, retried, 2, "429")
    ids = {retried: f"req-{uuid.uuid4().hex}", once: f"req-{uuid.uuid4().hex}"}
    for path, rid in ids.items():
        assert send(mend, "GET", path, headers={"X-Request-ID": rid}).status_code == 200
    lines: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + 5
    while len(lines) < 2 and time.monotonic() < deadline:
        lines = {line["request_id"]: line for line in mend.log_lines() if line.get("request_id")}
        lines = {rid: lines[rid] for rid in ids.values() if rid in lines}
        time.sleep(0.05)
    assert lines[ids[retried]]["attempts"] == 3
    assert lines[ids[once]].get("attempts", 1) == 1


def test_attempts_1_turns_retries_off(mend: MendProcess, upstream: str) -> None:
    """A route with ``attempts: 1``: a 503 and a reset GET each reach the upstream once and
    the agent gets the envelope, without an attempts member."""
    unavailable, reset = unique("off"), unique("off")
    script(upstream, unavailable, 1, "503")
    script(upstream, reset, 1, "reset")
    response = send(mend, "GET", unavailable)
    assert response.status_code == 503
    assert "attempts" not in envelope(response) or envelope(response)["attempts"] is None
    assert envelope(send(mend, "GET", reset))["applied"] == "unknown"
    assert len(hits(upstream, unavailable)) == len(hits(upstream, reset)) == 1


def test_top_level_policy_is_the_default_of_a_route_without_one(
    mend: MendProcess, upstream: str
) -> None:
    """The route ``inherit`` has no ``retries:``: the top-level policy (3 attempts) applies, so
    two 503s then a 200 reach the agent as the 200."""
    path = unique("inherit")
    script(upstream, path, 2, "503")
    assert send(mend, "GET", path).status_code == 200
    assert len(hits(upstream, path)) == 3


def test_body_over_body_max_bytes_is_not_retried(mend: MendProcess, upstream: str) -> None:
    """``body_max_bytes: 16``: a PUT of a longer body answered 503 is not sent again (mend did
    not keep it) and the upstream got it whole; a PUT within the cap is retried."""
    big, small = unique("small"), unique("small")
    script(upstream, big, 1, "503")
    script(upstream, small, 1, "503")
    long_body = json.dumps({"note": "x" * 200}).encode()
    declined = counter(mend, "mend_retries_declined_total", route="small", why="body")
    assert send(mend, "PUT", big, long_body).status_code == 503
    assert [h["body"] for h in hits(upstream, big)] == [long_body.decode()]
    assert counter(mend, "mend_retries_declined_total", route="small", why="body") == declined + 1
    assert send(mend, "PUT", small, b"{}").status_code == 200
    assert len(hits(upstream, small)) == 2


def test_the_deadline_bounds_all_tries(mend: MendProcess, upstream: str) -> None:
    """10 attempts of 0.4 s each on a route whose read_timeout is 1 s, against an upstream
    that never answers: the tries stop at the deadline (2 or 3 of them, not 10) and the agent
    gets UPSTREAM_TIMEOUT with the attempts made, well within a few deadlines."""
    path = unique("deadline")
    script(upstream, path, 99, "hang")
    declined = counter(mend, "mend_retries_declined_total", route="deadline", why="deadline")
    started = time.monotonic()
    response = send(mend, "GET", path)
    took = time.monotonic() - started
    error = envelope(response)
    assert error["code"] == "UPSTREAM_TIMEOUT"
    tries = len(hits(upstream, path))
    assert 2 <= tries <= 3
    assert error["attempts"]["count"] == tries
    assert took < SHORT_DEADLINE + 2.0
    after = counter(mend, "mend_retries_declined_total", route="deadline", why="deadline")
    assert after == declined + 1


def test_websocket_upgrade_is_never_retried(mend: MendProcess, upstream: str) -> None:
    """A WebSocket upgrade answered 503: the agent gets the 503 and the upstream saw one
    request (a tunnel is never sent again)."""
    path = unique("fast")
    script(upstream, path, 1, "503")
    request = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\n"
        "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    ).encode()
    response = raw_exchange(mend.port, request)
    assert status_of(response) == 503
    assert body_of(response)["error"]["upstream_status"] == 503
    assert len(hits(upstream, path)) == 1


async def test_websocket_passes_on_a_route_that_retries(mend: MendProcess, upstream: str) -> None:
    """With a retry policy on the route, a WebSocket still opens through mend and echoes."""
    path = unique("fast")
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(f"http://127.0.0.1:{mend.port}{path}") as socket,
    ):
        await socket.send_str("ping")
        assert (await socket.receive(timeout=10)).data == "ping"
    assert [h["answer"] for h in hits(upstream, path)] == ["101"]


# -- MCP -------------------------------------------------------------------------------------


def mcp_hits(mcp_upstream: str, tag: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{mcp_upstream}/_hits", params={"tag": tag}, timeout=5)
    found: list[dict[str, Any]] = answer.json()["hits"]
    return found


@pytest.mark.parametrize("tool", ["lookup", "set_flag"])
async def test_annotated_tool_call_is_retried_after_a_reset(
    mend: MendProcess, mcp_upstream: str, tool: str
) -> None:
    """With the SDK's client through mend, after tools/list: a call of a tool annotated
    read-only or idempotent whose connection resets is sent again, and the tool's result
    reaches the client; the upstream saw the call twice."""
    tag = uuid.uuid4().hex
    async with Client(f"http://127.0.0.1:{mend.port}/mcp", mode="legacy") as client:
        listed = await client.list_tools()
        assert {t.name for t in listed.tools} == {"lookup", "set_flag", "launch"}
        result = await client.call_tool(tool, {"tag": tag})
    assert result.is_error is False, result
    assert result.content[0].text == f"{tool} done for {tag}"  # type: ignore[union-attr]
    assert [h["tool"] for h in mcp_hits(mcp_upstream, tag)] == [tool, tool]


async def test_unannotated_tool_call_is_not_retried(mend: MendProcess, mcp_upstream: str) -> None:
    """A call of the tool without annotations (not idempotent) whose connection resets: the
    client gets an isError result whose envelope says it may have been applied, and the
    upstream saw exactly one call."""
    tag = uuid.uuid4().hex
    async with Client(f"http://127.0.0.1:{mend.port}/mcp", mode="legacy") as client:
        await client.list_tools()
        result = await client.call_tool("launch", {"tag": tag})
    assert result.is_error is True
    error = (result.meta or {})["mend/error"]
    assert (error["applied"], error["retryable"]) == ("unknown", False)
    assert len(mcp_hits(mcp_upstream, tag)) == 1


MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-03-26",
}


def _rpc(mend: MendProcess, document: Any) -> httpx.Response:
    return httpx.post(
        f"http://127.0.0.1:{mend.port}/mcp", json=document, headers=MCP_HEADERS, timeout=30
    )


def _call(number: int, tool: str, tag: str) -> dict[str, Any]:
    params = {"name": tool, "arguments": {"tag": tag}}
    return {"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": params}


def test_batch_of_safe_calls_is_retried_and_a_mixed_one_is_not(
    mend: MendProcess, mcp_upstream: str
) -> None:
    """A JSON-RPC batch (MCP 2025-03-26) whose connection resets: sent again when every call in
    it is safe (read-only and idempotent tools), answered with both results; not when one call
    is not (the unannotated tool), the upstream seeing the batch once."""
    listed = _rpc(mend, {"jsonrpc": "2.0", "id": 0, "method": "tools/list"})
    assert listed.status_code == 200, listed.text
    safe, mixed = uuid.uuid4().hex, uuid.uuid4().hex
    answer = _rpc(mend, [_call(1, "lookup", safe), _call(2, "set_flag", safe)])
    assert answer.status_code == 200, answer.text
    results = {item["id"]: item["result"] for item in answer.json()}
    assert results[1]["content"][0]["text"] == f"lookup done for {safe}"
    assert results[2]["content"][0]["text"] == f"set_flag done for {safe}"
    assert len(mcp_hits(mcp_upstream, safe)) == 4  # two calls, twice
    _rpc(mend, [_call(3, "lookup", mixed), _call(4, "launch", mixed)])
    assert len(mcp_hits(mcp_upstream, mixed)) == 2  # the batch once


# -- an open circuit ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def circuit_mend(tmp_path_factory: pytest.TempPathFactory, upstream: str) -> Iterator[MendProcess]:
    """mend with circuits on (one failed request opens an operation's), one route retrying."""
    route = {"name": "guarded", "upstream": upstream, "read_timeout": DEADLINE, "retries": FAST}
    config = {"watch_rules": False, "circuit": {"failures": 1, "open_s": 5}, "routes": [route]}
    with mend_process(Path(tmp_path_factory.mktemp("circuit")), config) as running:
        yield running


def test_a_circuit_opened_during_the_wait_stops_the_retry(
    circuit_mend: MendProcess, upstream: str
) -> None:
    """Request A gets a 503 stating a wait of 0.8 s, so mend waits to retry it; meanwhile
    request B of the same operation gets a 503 stating 30 s, is answered at once, and opens the
    operation's circuit (request C, sent then, is answered by the circuit). A's retry is then
    not sent: the upstream saw two requests, A gets an error, and the retry is declined as the
    circuit's."""
    path = f"/guarded/{uuid.uuid4().hex[:12]}"
    script(upstream, path, answers=["503-after:0.8", "503-after:30"])
    declined = counter(circuit_mend, "mend_retries_declined_total", why="circuit")
    answers: list[httpx.Response] = []
    first = threading.Thread(target=lambda: answers.append(send(circuit_mend, "GET", path)))
    first.start()
    deadline = time.monotonic() + 5
    while not hits(upstream, path) and time.monotonic() < deadline:
        time.sleep(0.02)
    second = send(circuit_mend, "GET", path)
    third = send(circuit_mend, "GET", path)  # while A waits: the circuit answers it
    first.join(10)
    assert second.status_code == 503
    assert envelope(third)["rule"] == "proxy.upstream_unavailable", third.text
    assert answers[0].status_code != 200, answers[0].text
    assert [h["answer"] for h in hits(upstream, path)] == ["503-after:0.8", "503-after:30"]
    assert counter(circuit_mend, "mend_retries_declined_total", why="circuit") == declined + 1
