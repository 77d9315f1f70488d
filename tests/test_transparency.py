"""Through mend, what works direct works the same (issue 14): real clients against real servers,
once direct and once through mend, compared byte for byte where bytes must match."""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.hostile.procs import MendProcess, RawServer, mend_process, raw_server, read_head

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


@pytest.fixture(scope="module")
def upstreams() -> Iterator[dict[str, RawServer]]:
    with ExitStack() as stack:
        yield {"sink": stack.enter_context(raw_server(no_continue_sink))}


@pytest.fixture(scope="module")
def mend(
    tmp_path_factory: pytest.TempPathFactory, upstreams: dict[str, RawServer]
) -> Iterator[MendProcess]:
    config = {
        "watch_rules": False,
        "routes": [
            {"name": name, "prefix": f"/{name}", "upstream": f"http://127.0.0.1:{s.port}"}
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
