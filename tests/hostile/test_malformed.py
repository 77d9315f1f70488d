"""Requests mend refuses itself get envelopes, with the status meant for them (issue 13 §4,
issue 14 §7): an over-long request line 414, too many or too large headers 431, a malformed
request 400; each with an ``X-Request-ID`` and one JSON log line, never a traceback."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hostile.procs import (
    MendProcess,
    Recorder,
    body_of,
    echo_server,
    mend_process,
    raw_exchange,
    status_of,
)


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[int, Recorder]]:
    with echo_server() as server:
        yield server


@pytest.fixture(scope="module")
def mend(
    tmp_path_factory: pytest.TempPathFactory, upstream: tuple[int, Recorder]
) -> Iterator[MendProcess]:
    config = {
        "watch_rules": False,
        "routes": [{"name": "a", "upstream": f"http://127.0.0.1:{upstream[0]}"}],
    }
    with mend_process(Path(tmp_path_factory.mktemp("malformed")), config) as running:
        yield running


def _send(mend: MendProcess, head: bytes) -> bytes:
    return raw_exchange(mend.port, head, timeout=10)


def _headers(response: bytes) -> dict[str, str]:
    head = response.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")[1:]
    return {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head)}


def test_request_line_over_the_limit_is_414(mend: MendProcess) -> None:
    """A target longer than max_request_line (64 KiB) gets a 414 URI_TOO_LONG envelope."""
    response = _send(mend, b"GET /" + b"a" * (70 << 10) + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_of(response) == 414
    assert body_of(response)["error"]["code"] == "URI_TOO_LONG"
    assert _headers(response)["x-request-id"].startswith("req_")


def test_long_target_under_envoys_limit_passes(
    mend: MendProcess, upstream: tuple[int, Recorder]
) -> None:
    """A 20 KB target (aiohttp's default refused anything over 8,190 bytes) reaches the upstream."""
    target = "/" + "b" * 20_000
    response = _send(mend, f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert status_of(response) == 200
    assert upstream[1].targets[-1] == target


def test_too_many_headers_is_431(mend: MendProcess) -> None:
    """More header fields than max_headers (100) get a 431 REQUEST_HEADERS_TOO_LARGE envelope."""
    fields = b"".join(b"X-H%d: v\r\n" % i for i in range(150))
    response = _send(mend, b"GET / HTTP/1.1\r\nHost: x\r\n" + fields + b"\r\n")
    assert status_of(response) == 431
    assert body_of(response)["error"]["code"] == "REQUEST_HEADERS_TOO_LARGE"


def test_header_over_the_field_limit_is_431(mend: MendProcess) -> None:
    """One header value over max_header_size gets 431, not a 400 in plain text."""
    response = _send(
        mend, b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"c" * (70 << 10) + b"\r\n\r\n"
    )
    assert status_of(response) == 431
    assert body_of(response)["error"]["code"] == "REQUEST_HEADERS_TOO_LARGE"


@pytest.mark.parametrize(
    "head",
    [
        b"GARBAGE\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n",
    ],
)
def test_malformed_requests_get_a_400_envelope(mend: MendProcess, head: bytes) -> None:
    """Whatever aiohttp's parser refuses is a 400 MALFORMED_REQUEST envelope in JSON."""
    response = _send(mend, head)
    assert status_of(response) == 400
    assert body_of(response)["error"]["code"] == "MALFORMED_REQUEST"
    assert _headers(response)["content-type"] == "application/json"


def test_refusals_are_logged_as_json_lines(mend: MendProcess) -> None:
    """Each refusal is one JSON request line with its code; no plain-text traceback."""
    _send(mend, b"GARBAGE-FOR-THE-LOG\r\n\r\n")
    time.sleep(0.5)  # request lines are written in batches, at most 0.2 s late
    text = mend.log_path.read_text()
    assert "Traceback" not in text
    lines = mend.log_lines()  # raises if any line is not JSON
    refused = [line for line in lines if line.get("code") == "MALFORMED_REQUEST"]
    assert refused
    assert refused[-1]["status"] == 400
