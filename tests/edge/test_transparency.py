"""Through mend, what works direct works the same (issue 14): real clients against real servers,
once direct and once through mend, compared byte for byte where bytes must match."""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.hostile.procs import (
    MendProcess,
    RawServer,
    mend_process,
    raw_exchange,
    raw_server,
    read_head,
)

UPLOAD = bytes(range(256)) * 4096  # 1 MiB


async def no_continue_sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """An upstream that never sends 100 Continue (many do not): it reads the body, then answers
    with the body's SHA-256 and whether it saw an ``Expect`` header."""
    while True:
        head = (await read_head(reader)).decode("latin-1").lower()
        length = next(
            int(line.split(":", 1)[1])
            for line in head.split("\r\n")
            if line.startswith("content-length:")
        )
        body = await reader.readexactly(length)
        answer = json.dumps(
            {"sha256": hashlib.sha256(body).hexdigest(), "expect": "\r\nexpect:" in head}
        ).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % len(answer)
            + answer
        )
        await writer.drain()


DIGEST = (
    'Digest realm="api", nonce="6bf5d6e4da1ce66918800195d6b9130d", '
    'opaque="372825293d1c26955496c80ed6426e9e", qop=auth'
)
#: Raw responses by request path, for the header tests (each a full HTTP/1.1 response).
CANNED = {
    b"/digest": b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: "
    + DIGEST.encode()
    + b"\r\nContent-Length: 0\r\n\r\n",
    b"/banner": b"HTTP/1.1 200 OK\r\nServer: Werkzeug/3.1.9 Python/3.11.7\r\n"
    b"X-Powered-By: Express\r\nX-AspNet-Version: 4.0.30319\r\nContent-Type: text/plain\r\n"
    b"X-Custom: kept\r\nContent-Length: 2\r\n\r\nok",
    b"/latin1": b"HTTP/1.1 200 OK\r\nContent-Disposition: attachment; filename=r\xe9sum\xe9.pdf\r\n"
    b"X-Name: caf\xe9\r\nContent-Type: application/pdf\r\nContent-Length: 3\r\n\r\npdf",
    b"/untyped": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nbytes",
    b"/untyped-stream": b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"s" * 100000,
    b"/moved": b"HTTP/1.1 301 Moved Permanently\r\nLocation: /elsewhere\r\n"
    b"Content-Length: 0\r\n\r\n",
    b"/login": b"HTTP/1.1 401 Unauthorized\r\nSet-Cookie: session=abc123; Path=/; HttpOnly\r\n"
    b"Set-Cookie: csrf=xyz; Path=/\r\nWWW-Authenticate: Bearer\r\nContent-Type: application/json"
    b'\r\nContent-Length: 27\r\n\r\n{"error": "not logged in"}\n',
}


async def canned(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers each request with the canned response for its path, byte for byte."""
    while True:
        head = await read_head(reader)
        path = head.split(b" ", 2)[1]
        writer.write(CANNED[b"/" + path.rsplit(b"/", 1)[-1]])
        await writer.drain()


GAP_S = 1.0


async def sse_with_gaps(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Three server-sent events ``GAP_S`` apart, chunked, then the end of the stream."""
    await read_head(reader)
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
        b"Connection: close\r\n\r\n"
    )
    for n in range(3):
        event = b'id: %d\ndata: {"n": %d}\n\n' % (n, n)
        writer.write(b"%x\r\n%s\r\n" % (len(event), event))
        await writer.drain()
        await asyncio.sleep(GAP_S)
    writer.write(b"0\r\n\r\n")
    await writer.drain()


async def long_poll(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers 35 s after the request: longer than the old 30 s read timeout."""
    await read_head(reader)
    await asyncio.sleep(35)
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nnews")
    await writer.drain()


async def echo_head(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers with the request head it received, byte for byte, as the body."""
    while True:
        head = await read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(head) + head)
        await writer.drain()


@pytest.fixture(scope="module")
def upstreams() -> Iterator[dict[str, RawServer]]:
    with ExitStack() as stack:
        yield {
            "sink": stack.enter_context(raw_server(no_continue_sink)),
            "canned": stack.enter_context(raw_server(canned)),
            "sse": stack.enter_context(raw_server(sse_with_gaps)),
            "poll": stack.enter_context(raw_server(long_poll)),
            "echo": stack.enter_context(raw_server(echo_head)),
        }


@pytest.fixture(scope="module")
def mend(
    tmp_path_factory: pytest.TempPathFactory, upstreams: dict[str, RawServer]
) -> Iterator[MendProcess]:
    config = {
        "watch_rules": False,
        "routes": [
            {
                "name": name,
                "prefix": f"/{name}",
                "upstream": f"http://127.0.0.1:{s.port}",
                # every route inspects its successes: streams must flow all the same
                "success_rules": ["graphql.*"],
            }
            for name, s in upstreams.items()
        ],
    }
    with mend_process(Path(tmp_path_factory.mktemp("transparency")), config) as running:
        yield running


def _curl_upload(url: str, tmp: Path, *extra: str) -> tuple[float, dict[str, object]]:
    body = tmp / "upload.bin"
    body.write_bytes(UPLOAD)
    started = time.monotonic()
    result = subprocess.run(
        ["curl", "-sS", "--max-time", "30", "--data-binary", f"@{body}", *extra, url],
        capture_output=True,
        check=True,
    )
    return time.monotonic() - started, json.loads(result.stdout)


def test_expect_continue_adds_no_stall(
    mend: MendProcess, upstreams: dict[str, RawServer], tmp_path: Path
) -> None:
    """curl's ``Expect: 100-continue`` upload of 1 MiB: direct to an upstream that never sends
    100, curl waits for its 1 s timer; through mend, which answers 100 itself, it does not, and
    the body arrives byte-identical."""
    expect = ("-H", "Expect: 100-continue")
    direct_s, direct = _curl_upload(
        f"http://127.0.0.1:{upstreams['sink'].port}/", tmp_path, *expect
    )
    mend_s, through = _curl_upload(f"http://127.0.0.1:{mend.port}/sink/", tmp_path, *expect)
    expected = hashlib.sha256(UPLOAD).hexdigest()
    assert direct["sha256"] == through["sha256"] == expected
    assert direct_s > 0.9  # the stall this test is about: curl's own timer
    assert mend_s < direct_s / 2


def test_expect_is_answered_not_forwarded(mend: MendProcess, tmp_path: Path) -> None:
    """mend answers Expect itself (as Envoy does), so the upstream never waits on it."""
    _, through = _curl_upload(
        f"http://127.0.0.1:{mend.port}/sink/", tmp_path, "-H", "Expect: 100-continue"
    )
    assert through["expect"] is False


def test_upload_without_expect_is_unchanged(mend: MendProcess, tmp_path: Path) -> None:
    """Without Expect (``-H 'Expect:'`` removes curl's own), the upload goes through as before."""
    _, through = _curl_upload(f"http://127.0.0.1:{mend.port}/sink/", tmp_path, "-H", "Expect:")
    assert through["sha256"] == hashlib.sha256(UPLOAD).hexdigest()


def test_refused_request_is_refused_before_its_body(tmp_path: Path) -> None:
    """With a body limit, an Expect request over it gets 413 at once: curl never sends the
    body, and no 100 came first."""
    with raw_server(no_continue_sink) as sink:
        config = {
            "watch_rules": False,
            "request_body_max_bytes": 1000,
            "routes": [{"name": "s", "upstream": f"http://127.0.0.1:{sink.port}"}],
        }
        with mend_process(tmp_path, config) as mend:
            body = tmp_path / "upload.bin"
            body.write_bytes(UPLOAD)
            result = subprocess.run(
                [
                    "curl",
                    "-sS",
                    "-v",
                    "--max-time",
                    "10",
                    "--data-binary",
                    f"@{body}",
                    "-H",
                    "Expect: 100-continue",
                    f"http://127.0.0.1:{mend.port}/",
                ],
                capture_output=True,
                check=False,
            )
    verbose = result.stderr.decode("latin-1")
    assert "< HTTP/1.1 413" in verbose
    assert "100 Continue" not in verbose
    assert json.loads(result.stdout)["error"]["code"] == "REQUEST_TOO_LARGE"


def _head(
    port: int, target: str, *extra: str, timeout: float = 10.0
) -> tuple[int, dict[str, list[str]], bytes]:
    """Status, headers (lower-cased names, every value) and body, from a raw HTTP exchange."""
    request = f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    message = request + "".join(f"{h}\r\n" for h in extra) + "\r\n"
    response = raw_exchange(port, message.encode(), timeout=timeout)
    head, _, body = response.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, list[str]] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.setdefault(name.strip().lower(), []).append(value.strip())
    return int(lines[0].split()[1]), headers, body


def test_success_headers_lose_the_upstream_banner(mend: MendProcess) -> None:
    """A success keeps its own headers but not the upstream's software banner: ``Server: mend``,
    no X-Powered-By or X-AspNet-Version, and the agent's X-Request-ID echoed."""
    status, headers, body = _head(mend.port, "/canned/banner", "X-Request-ID: agent-42")
    assert (status, body) == (200, b"ok")
    assert headers["server"] == ["mend"]
    assert "x-powered-by" not in headers
    assert "x-aspnet-version" not in headers
    assert headers["x-custom"] == ["kept"]
    assert headers["x-request-id"] == ["agent-42"]


def test_every_success_gets_a_request_id(mend: MendProcess) -> None:
    """Without an agent id, mend's own id is on the success, as on envelopes."""
    _, headers, _ = _head(mend.port, "/canned/banner")
    assert headers["x-request-id"][0].startswith("req_")


@pytest.mark.parametrize("path", ["/canned/untyped", "/canned/untyped-stream", "/canned/moved"])
def test_no_content_type_is_invented(
    mend: MendProcess, upstreams: dict[str, RawServer], path: str
) -> None:
    """A response without Content-Type (small, streamed, or a body-less 301) has none through
    mend either: aiohttp used to add application/octet-stream."""
    _, direct, direct_body = _head(upstreams["canned"].port, path)
    _, through, through_body = _head(mend.port, path)
    assert "content-type" not in direct
    assert "content-type" not in through
    assert through_body == direct_body


def test_set_cookie_survives_into_the_envelope(mend: MendProcess) -> None:
    """A 401 that sets cookies becomes an envelope that still sets them, unchanged."""
    status, headers, body = _head(mend.port, "/canned/login")
    assert status == 401
    assert json.loads(body)["error"]["category"] == "auth"
    assert headers["set-cookie"] == ["session=abc123; Path=/; HttpOnly", "csrf=xyz; Path=/"]


def _event_times(port: int, target: str) -> list[float]:
    """Seconds from sending the request to each SSE event's arrival, read off a raw socket."""
    times: list[float] = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        started = time.monotonic()
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        seen = b""
        while not seen.endswith(b"0\r\n\r\n") and (chunk := sock.recv(65536)):
            seen += chunk
            while seen.count(b"\n\n") > len(times):
                times.append(time.monotonic() - started)
    return times


def test_sse_flows_through_an_inspecting_route(
    mend: MendProcess, upstreams: dict[str, RawServer]
) -> None:
    """On a route with success_rules, each event arrives as it is sent: the first one no later
    than a fraction of the gap after it arrives direct (it used to wait for the whole stream)."""
    direct = _event_times(upstreams["sse"].port, "/sse/")
    through = _event_times(mend.port, "/sse/")
    assert len(direct) == len(through) == 3
    for sent_direct, sent_through in zip(direct, through, strict=True):
        assert sent_through - sent_direct < GAP_S / 2


@pytest.mark.slow
def test_long_poll_longer_than_thirty_seconds(mend: MendProcess) -> None:
    """A long-poll answered after 35 s gets its answer (read_timeout is 60 s, as nginx's)."""
    status, _, body = _head(mend.port, "/poll/", timeout=60)
    assert (status, body) == (200, b"news")


def test_latin1_response_header_bytes_pass_unchanged(
    mend: MendProcess, upstreams: dict[str, RawServer]
) -> None:
    """Header values in latin-1 (not UTF-8) reach the agent byte for byte; aiohttp's writer
    used to drop the bytes it could not encode (``caf\\xe9`` became ``caf``)."""
    request = b"GET /canned/latin1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    direct = raw_exchange(upstreams["canned"].port, request)
    through = raw_exchange(mend.port, request)
    for line in (b"Content-Disposition: attachment; filename=r\xe9sum\xe9.pdf", b"X-Name: caf\xe9"):
        assert line in direct
        assert line in through
    assert through.endswith(b"\r\n\r\npdf")


async def hang_up_target(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers a streamed success 0.3 s late: the agent has hung up by then."""
    await read_head(reader)
    await asyncio.sleep(0.3)
    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    await writer.drain()


def test_an_agent_that_hangs_up_is_not_mends_failure(tmp_path: Path) -> None:
    """An agent gone before its answer is logged as 499 client_closed, not as a
    PROXY_INTERNAL_ERROR counted against mend (nginx's 499)."""
    with raw_server(hang_up_target) as slow:
        config = {
            "watch_rules": False,
            "routes": [{"name": "s", "upstream": f"http://127.0.0.1:{slow.port}"}],
        }
        with mend_process(tmp_path, config) as mend:
            with socket.create_connection(("127.0.0.1", mend.port)) as sock:
                sock.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
            time.sleep(1.0)
            lines = [line for line in mend.log_lines() if line.get("event") == "request"]
    assert [(line["status"], line["outcome"]) for line in lines] == [(499, "client_closed")]


def test_digest_challenge_survives_into_the_envelope(mend: MendProcess) -> None:
    """A 401's Digest challenge keeps its nonce and opaque as sent (redacted, they made Digest
    authentication impossible through mend: client-suites B1); the envelope is still built."""
    status, headers, body = _head(mend.port, "/canned/digest")
    assert status == 401
    assert headers["www-authenticate"] == [DIGEST]
    assert json.loads(body)["error"]["category"] == "auth"


def test_latin1_request_header_bytes_reach_the_upstream(mend: MendProcess) -> None:
    """An agent's header value in latin-1 reaches the upstream byte for byte (aiohttp's client
    writer used to drop what it could not encode as UTF-8)."""
    request = (
        b"GET /echo/ HTTP/1.1\r\nHost: x\r\nX-Name: caf\xe9\r\n"
        b"Content-Disposition: attachment; filename=r\xe9sum\xe9.pdf\r\nConnection: close\r\n\r\n"
    )
    seen = raw_exchange(mend.port, request).partition(b"\r\n\r\n")[2]
    assert b"\r\nX-Name: caf\xe9\r\n" in seen
    assert b"filename=r\xe9sum\xe9.pdf\r\n" in seen
