"""Headers as they came (issue 39): through mend, a real upstream's header names keep their
case, nothing is invented on a body-less answer, and a rewritten error keeps every header that
does not describe the body it replaced (docs/headers.md). The upstream is uvicorn, which sends
every name in lower case."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.edge.envelope_headers import DROPPED, OF_THE_BODY
from proxy.edge.forward import HOP_BY_HOP
from tests.hostile.procs import ROOT, MendProcess, free_port, mend_process, raw_exchange, wait_port


@pytest.fixture(scope="module")
def upstream() -> Iterator[int]:
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "tests.edge.headers_app:app"]
    options = ["--host", "127.0.0.1", "--port", str(port), "--lifespan", "off"]
    proc = subprocess.Popen([*command, *options, "--log-level", "warning"], cwd=ROOT)
    try:
        wait_port(port)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def mend(tmp_path_factory: pytest.TempPathFactory, upstream: int) -> Iterator[MendProcess]:
    config = {
        "watch_rules": False,
        "routes": [{"name": "api", "prefix": "/", "upstream": f"http://127.0.0.1:{upstream}"}],
    }
    with mend_process(Path(tmp_path_factory.mktemp("headers")), config) as running:
        yield running


def _exchange(
    port: int, target: str, *extra: str, method: str = "GET"
) -> tuple[int, list[tuple[str, str]], bytes]:
    """Status, header fields as sent (names unchanged, in order) and body, off a raw socket."""
    request = f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    message = request + "".join(f"{h}\r\n" for h in extra) + "\r\n"
    head, _, body = raw_exchange(port, message.encode()).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    fields = [(n, v.strip()) for n, _, v in (line.partition(":") for line in lines[1:])]
    return int(lines[0].split()[1]), fields, body


def _names(fields: list[tuple[str, str]]) -> list[str]:
    """The names, less ``Connection``: each hop's own (mend's with the upstream stays open)."""
    return [name for name, _ in fields if name.lower() != "connection"]


def _values(fields: list[tuple[str, str]], name: str) -> list[str]:
    return [v for n, v in fields if n.lower() == name]


def test_success_names_keep_their_case_and_place(mend: MendProcess, upstream: int) -> None:
    """A success's head through mend is the upstream's, names byte for byte and in order, with
    ``server: mend`` in the upstream's place and the request id added: no field re-cased
    (``Transfer-Encoding``, ``Server`` used to be), none moved."""
    _, direct, _ = _exchange(upstream, "/")
    _, through, body = _exchange(mend.port, "/")
    assert body.endswith(b"hello\r\n0\r\n\r\n") or body == b"hello"
    assert _names(through) == [*_names(direct)[:-1], "X-Request-ID", _names(direct)[-1]]
    assert dict(through)["server"] == "mend"


def test_a_rewritten_redirect_keeps_its_name(mend: MendProcess, upstream: int) -> None:
    """A body-less 301's ``location`` keeps its name and place, and no ``Content-Type`` is
    invented for it."""
    _, direct, _ = _exchange(upstream, "/moved")
    status, through, _ = _exchange(mend.port, "/moved")
    assert status == 301
    assert _names(through) == [*_names(direct)[:-1], "X-Request-ID", _names(direct)[-1]]
    assert _values(through, "location") == ["/elsewhere"]


@pytest.mark.parametrize(
    ("target", "method"),
    [("/moved", "GET"), ("/empty", "GET"), ("/unchanged", "GET"), ("/", "HEAD")],
)
def test_nothing_is_invented_on_a_bodyless_answer(
    mend: MendProcess, target: str, method: str
) -> None:
    """A 301, 204, 304 or a HEAD answer without a Content-Type gets none through mend (aiohttp
    would add ``application/octet-stream``), nor a body."""
    status, through, _ = _exchange(mend.port, target, method=method)
    assert status in (200, 204, 301, 304)
    if target != "/":
        assert not _values(through, "content-type")
    else:
        assert _values(through, "content-type") == ["text/plain"]


def test_an_envelope_keeps_the_upstreams_cors_headers(mend: MendProcess) -> None:
    """A 404 rewritten into an envelope keeps the upstream's CORS answer to the request's
    ``Origin`` (``localhost``: redaction would mask it), its ``Vary`` with mend's ``Accept``
    added, and the headers of the API's own (``x-more-info``, ``link``, ``cache-control``)."""
    origin = "http://localhost:3000"
    status, fields, body = _exchange(mend.port, "/missing", f"Origin: {origin}")
    assert status == 404
    assert json.loads(body)["error"]["upstream_status"] == 404
    assert _values(fields, "access-control-allow-origin") == [origin]
    assert _values(fields, "access-control-allow-credentials") == ["true"]
    assert _values(fields, "access-control-expose-headers") == ["X-More-Info, X-Request-ID"]
    assert _values(fields, "vary") == ["Origin, Accept"]
    assert _values(fields, "x-more-info") == ["https://docs.example/errors/not-found"]
    assert _values(fields, "link") == ['</docs/errors>; rel="help"']
    assert _values(fields, "cache-control") == ["no-store"]


def test_an_envelope_drops_what_describes_the_old_body(mend: MendProcess) -> None:
    """The envelope is not the upstream's body: its validators, language and checksum go, and
    so does the upstream's banner; its type and length are the envelope's."""
    _, fields, body = _exchange(mend.port, "/missing", "Origin: https://app.example")
    for name in ("etag", "last-modified", "content-language", "content-md5", "x-powered-by"):
        assert not _values(fields, name), name
    assert _values(fields, "content-type") == ["application/json"]
    assert _values(fields, "content-length") == [str(len(body))]
    assert _values(fields, "server") == ["mend"]


def test_an_envelope_drops_a_header_redaction_would_change(mend: MendProcess) -> None:
    """A kept header naming an internal address is dropped whole, neither leaked nor sent half
    masked (``see an internal service``); the other headers stay."""
    _, fields, body = _exchange(mend.port, "/missing")
    assert not _values(fields, "x-help")
    assert b"10.1.2.3" not in body
    assert _values(fields, "x-more-info") == ["https://docs.example/errors/not-found"]


def test_an_envelopes_names_keep_the_upstreams_case(mend: MendProcess) -> None:
    """The names the upstream sent are spelt as it spelt them on the envelope too, those mend
    writes anew (``content-type``, ``server``) included; mend's own keep their usual case."""
    _, fields, _ = _exchange(mend.port, "/missing", "Origin: https://app.example")
    names = _names(fields)
    for name in ("date", "content-type", "server", "vary", "access-control-allow-origin"):
        assert name in names, (name, names)
    assert "X-Error-Code" in names
    assert "X-Request-ID" in names


def test_the_drop_list_is_documented() -> None:
    """docs/headers.md lists every header an envelope drops, with the reason the code gives."""
    doc = (ROOT / "docs" / "headers.md").read_text()
    rows = dict(re.findall(r"^\| `([a-z0-9-]+)` \| (.+?) \|$", doc, re.M))
    for name, why in OF_THE_BODY.items():
        assert rows.get(name) == why, name
    hop_row = next(line for line in doc.splitlines() if line.startswith("| `connection`"))
    for name in HOP_BY_HOP:
        assert f"`{name}`" in hop_row, name
    for name, why in DROPPED.items():
        assert name in HOP_BY_HOP or rows.get(name) == why, name
