"""Request smuggling, differentially: ambiguous requests through mend to seven real origins.

Each case is bytes an agent sends on one connection: the classic CL.TE, TE.CL, TE.TE and CL.CL
forms, obfuscated codings, upgrade requests with bodies (the family mend got wrong), pipelining,
``Expect`` with an early body, HTTP/1.0 keep-alive, bad line ends and control bytes. For every
case and every origin (``origins.py``), with a tap between mend and the origin:

- what the origin parsed (its own log) is exactly what mend answered from it, in order, and
  exactly the requests the case means, with their bodies; no origin ever reads ``/smuggled``;
- the bytes mend sent on each upstream connection (the tap) parse, with h11 (a parser mend does
  not use), as whole requests and nothing else, and are the same requests;
- a request refused for its framing is refused before anything goes upstream (no byte tapped);
- a canary sent afterwards on a new agent connection, on the same upstream pool, gets its own
  answer.

The full matrix is slow (``make test-slow``); the default run takes two origins.
"""

from __future__ import annotations

import itertools
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import h11
import httptools
import pytest

from tests.hostile.origins import ORIGINS, Origin, Tap, missing, origin, tap
from tests.hostile.procs import MendProcess, mend_process

H = b"Host: api\r\n"
CLOSE = b"Connection: close\r\n"


@dataclass(frozen=True)
class Case:
    id: str
    data: bytes
    #: the requests the origin must parse, as (method, target, body); empty when refused
    forwarded: tuple[tuple[str, str, bytes], ...] = ()
    #: the status mend refuses the case with, before anything goes upstream (``None``: none)
    refused: int | None = None


SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: api\r\n\r\n"
WS = b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
WS += b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"


def _cases() -> list[Case]:
    n = len(SMUGGLED)
    return [
        # --- upgrade requests with a body: the family mend got wrong --------------------------
        Case(
            "websocket-upgrade-with-a-request-as-body",
            b"GET /p HTTP/1.1\r\n" + H + WS + b"Content-Length: %d\r\n\r\n" % n + SMUGGLED,
            refused=400,
        ),
        Case(
            "websocket-upgrade-with-a-chunked-body",
            b"GET /p HTTP/1.1\r\n" + H + WS + b"Transfer-Encoding: chunked\r\n\r\n"
            b"%x\r\n" % n + SMUGGLED + b"\r\n0\r\n\r\n",
            refused=400,
        ),
        Case(
            "h2c-upgrade-with-a-body-then-a-request",
            b"POST /p HTTP/1.1\r\n" + H + b"Upgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\n"
            b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\nContent-Length: 5\r\n\r\nhello"
            b"GET /next HTTP/1.1\r\n" + H + CLOSE + b"\r\n",
            forwarded=(("POST", "/p", b"hello"), ("GET", "/next", b"")),
        ),
        Case(
            "h2c-upgrade-with-a-request-as-body",
            b"POST /p HTTP/1.1\r\n" + H + b"Upgrade: h2c\r\nConnection: Upgrade\r\n"
            b"Content-Length: %d\r\n\r\n"
            % n
            + SMUGGLED
            + b"GET /next HTTP/1.1\r\n"
            + H
            + CLOSE
            + b"\r\n",
            forwarded=(("POST", "/p", SMUGGLED), ("GET", "/next", b"")),
        ),
        Case(
            "h2c-upgrade-with-a-chunked-body",
            b"PUT /p HTTP/1.1\r\n" + H + b"Upgrade: h2c\r\nConnection: Upgrade\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n"
            b"GET /next HTTP/1.1\r\n" + H + CLOSE + b"\r\n",
            forwarded=(("PUT", "/p", b"abcde"), ("GET", "/next", b"")),
        ),
        Case(
            "h2c-upgrade-with-a-bad-chunk",
            b"PUT /p HTTP/1.1\r\n" + H + b"Upgrade: h2c\r\nConnection: Upgrade\r\n"
            b"Transfer-Encoding: chunked\r\n\r\nzz\r\n" + SMUGGLED,
            refused=400,
        ),
        Case(
            "h2c-upgrade-with-connection-close-then-a-request",
            b"POST /p HTTP/1.1\r\n" + H + b"Upgrade: h2c\r\nConnection: Upgrade, close\r\n"
            b"Content-Length: 2\r\n\r\nhi" + SMUGGLED,
            forwarded=(("POST", "/p", b"hi"),),
        ),
        Case(
            "websocket-upgrade-declined-then-a-request",
            b"GET /ws HTTP/1.1\r\n" + H + WS + b"\r\nGET /after HTTP/1.1\r\n" + H + CLOSE + b"\r\n",
            forwarded=(("GET", "/ws", b""), ("GET", "/after", b"")),
        ),
        Case(
            "a-request-then-a-websocket-upgrade-with-a-body",
            b"GET /first HTTP/1.1\r\n"
            + H
            + b"\r\nGET /p HTTP/1.1\r\n"
            + H
            + WS
            + b"Content-Length: %d\r\n\r\n" % n
            + SMUGGLED,
            forwarded=(("GET", "/first", b""),),
            refused=400,
        ),
        Case(
            "connect-with-bytes-after-it",
            b"CONNECT api:443 HTTP/1.1\r\n" + H + b"\r\n" + SMUGGLED,
            refused=400,
        ),
        # --- the classic forms ----------------------------------------------------------------
        Case(
            "cl-te",
            b"POST /p HTTP/1.1\r\n" + H + b"Content-Length: 6\r\nTransfer-Encoding: chunked\r\n"
            b"\r\n0\r\n\r\n" + SMUGGLED,
            refused=400,
        ),
        Case(
            "te-cl",
            b"POST /p HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n"
            b"\r\n5c\r\n" + SMUGGLED + b"\r\n0\r\n\r\n",
            refused=400,
        ),
        Case(
            "cl-cl-different",
            b"POST /p HTTP/1.1\r\n"
            + H
            + b"Content-Length: 0\r\nContent-Length: %d\r\n\r\n" % n
            + SMUGGLED,
            refused=400,
        ),
        Case(
            "cl-list",
            b"POST /p HTTP/1.1\r\n" + H + b"Content-Length: 2, 2\r\n\r\nhi",
            refused=400,
        ),
        Case(
            "cl-plus-sign",
            b"POST /p HTTP/1.1\r\n" + H + b"Content-Length: +2\r\n\r\nhi",
            refused=400,
        ),
        Case(
            "cl-leading-zeros-and-whitespace",
            b"POST /p HTTP/1.1\r\n" + H + b"Content-Length: 005 \t\r\n" + CLOSE + b"\r\nhello",
            forwarded=(("POST", "/p", b"hello"),),
        ),
        Case(
            "te-te-xchunked",
            b"POST /p HTTP/1.1\r\n"
            + H
            + b"Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n"
            + SMUGGLED,
            refused=400,
        ),
        Case(
            "te-te-trailing-tab",
            b"POST /p HTTP/1.1\r\n"
            + H
            + b"Transfer-Encoding: chunked\t\r\n\r\n0\r\n\r\n"
            + SMUGGLED,
            refused=400,
        ),
        Case(
            "te-te-no-break-space",
            b"POST /p HTTP/1.1\r\n"
            + H
            + b"Transfer-Encoding: chunked\xc2\xa0\r\n\r\n0\r\n\r\n"
            + SMUGGLED,
            refused=400,
        ),
        Case(
            "te-te-space-before-colon",
            b"POST /p HTTP/1.1\r\n"
            + H
            + b"Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n"
            + SMUGGLED,
            refused=400,
        ),
        Case(
            "te-te-vertical-tab",
            b"POST /p HTTP/1.1\r\n"
            + H
            + b"Transfer-Encoding:\x0bchunked\r\n\r\n0\r\n\r\n"
            + SMUGGLED,
            refused=400,
        ),
        Case(
            "te-te-two-fields-chunked-then-identity",
            b"POST /p HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n"
            b"Transfer-Encoding: identity\r\n\r\n0\r\n\r\n" + SMUGGLED,
            refused=400,
        ),
        Case(
            "te-gzip-then-chunked",
            b"POST /p HTTP/1.1\r\n" + H + b"Transfer-Encoding: gzip, chunked\r\n\r\n"
            b"5\r\nhello\r\n0\r\n\r\n" + SMUGGLED,
            refused=501,
        ),
        Case(
            "te-in-http-1.0",
            b"POST /p HTTP/1.0\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + SMUGGLED,
            refused=400,
        ),
        Case(
            "te-obs-fold",
            b"POST /p HTTP/1.1\r\n"
            + H
            + b"Transfer-Encoding: x\r\n chunked\r\n\r\n0\r\n\r\n"
            + SMUGGLED,
            refused=400,
        ),
        Case(
            "chunk-size-not-hex",
            b"POST /p HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n5g\r\nhello\r\n0\r\n"
            b"\r\n" + SMUGGLED,
            refused=400,
        ),
        Case(
            "chunk-size-overflow",
            b"POST /p HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
            b"10000000000000001\r\nhello\r\n0\r\n\r\n" + SMUGGLED,
            refused=400,
        ),
        Case(
            "chunked-with-extensions-and-trailers",
            b"POST /p HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n" + CLOSE + b"\r\n"
            b"3;name=value\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n",
            forwarded=(("POST", "/p", b"abc"),),
        ),
        Case(
            "a-request-as-a-body",
            b"POST /p HTTP/1.1\r\n"
            + H
            + b"Content-Length: %d\r\n" % n
            + CLOSE
            + b"\r\n"
            + SMUGGLED,
            forwarded=(("POST", "/p", SMUGGLED),),
        ),
        Case(
            "a-get-with-a-body-then-a-request",
            b"GET /p HTTP/1.1\r\n"
            + H
            + b"Content-Length: %d\r\n\r\n" % n
            + SMUGGLED
            + b"GET /next HTTP/1.1\r\n"
            + H
            + CLOSE
            + b"\r\n",
            forwarded=(("GET", "/p", SMUGGLED), ("GET", "/next", b"")),
        ),
        # --- line ends, control bytes, versions, targets -------------------------------------
        Case("bare-lf", b"GET /p HTTP/1.1\n" + H + b"\n" + SMUGGLED, refused=400),
        Case("bare-cr", b"GET /p HTTP/1.1\r" + H + b"\r\n" + SMUGGLED, refused=400),
        Case("nul-in-a-value", b"GET /p HTTP/1.1\r\n" + H + b"X-A: a\x00b\r\n\r\n", refused=400),
        Case("http-0.9", b"GET /p HTTP/0.9\r\n" + H + b"\r\n", refused=400),
        Case("http-2.0-line", b"GET /p HTTP/2.0\r\n" + H + b"\r\n", refused=400),
        Case(
            "absolute-form-target",
            b"GET http://evil.example/p HTTP/1.1\r\n" + H + CLOSE + b"\r\n",
            refused=400,
        ),
        Case(
            "a-fragment-in-the-target",
            b"GET /p?q=1#frag HTTP/1.1\r\n" + H + CLOSE + b"\r\n",
            forwarded=(("GET", "/p?q=1", b""),),
        ),
        # --- keep-alive, pipelining, Expect --------------------------------------------------
        Case(
            "three-pipelined-requests",
            b"GET /a HTTP/1.1\r\n" + H + b"\r\nPOST /b HTTP/1.1\r\n" + H + b"Content-Length: 3\r\n"
            b"\r\nxyzGET /c HTTP/1.1\r\n" + H + CLOSE + b"\r\n",
            forwarded=(("GET", "/a", b""), ("POST", "/b", b"xyz"), ("GET", "/c", b"")),
        ),
        Case(
            "http-1.0-keep-alive-with-a-body-then-a-request",
            b"POST /a HTTP/1.0\r\n" + H + b"Connection: keep-alive\r\nContent-Length: 3\r\n\r\n"
            b"xyzGET /b HTTP/1.0\r\n" + H + b"\r\n",
            forwarded=(("POST", "/a", b"xyz"), ("GET", "/b", b"")),
        ),
        Case(
            "http-1.0-without-keep-alive-then-a-request",
            b"GET /a HTTP/1.0\r\n" + H + b"\r\n" + SMUGGLED,
            forwarded=(("GET", "/a", b""),),
        ),
        Case(
            "expect-100-continue-with-an-early-body-then-a-request",
            b"POST /a HTTP/1.1\r\n" + H + b"Expect: 100-continue\r\nContent-Length: 5\r\n\r\n"
            b"helloGET /b HTTP/1.1\r\n" + H + CLOSE + b"\r\n",
            forwarded=(("POST", "/a", b"hello"), ("GET", "/b", b"")),
        ),
    ]


CASES = _cases()
#: the origins of the default run; the others are ``slow``
FAST = ("uvicorn-h11", "aiohttp")


def _origin_params() -> list[Any]:
    return [pytest.param(name, marks=() if name in FAST else pytest.mark.slow) for name in ORIGINS]


@dataclass
class Stack:
    origin: Origin
    tap: Tap
    mend: MendProcess


@pytest.fixture(scope="module", params=_origin_params())
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    name = request.param
    if (why := missing(name)) is not None:
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp(f"smuggling-{name}")
    with origin(name, tmp / "origin") as server, tap(server.port) as relay:
        route = {"name": "api", "upstream": f"http://127.0.0.1:{relay.port}", "read_timeout": 3}
        config = {"routes": [route], "client_body_timeout": 3}
        with mend_process(tmp, config) as mend:
            yield Stack(server, relay, mend)


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


class _Responses:
    """llhttp as a client: the responses in what mend sent back (interim ones left out)."""

    def __init__(self) -> None:
        self.done: list[Answer] = []
        self._headers: dict[str, str] = {}
        self._body = b""
        self.parser = httptools.HttpResponseParser(self)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self._body += body

    def on_message_complete(self) -> None:
        status = self.parser.get_status_code()
        if status >= 200:
            self.done.append(Answer(status, self._headers, self._body))
        self._headers, self._body = {}, b""


def exchange(port: int, data: bytes, within: float = 8.0) -> list[Answer]:
    """``data`` on a new connection to mend; the responses, read until mend closes."""
    responses = _Responses()
    with socket.create_connection(("127.0.0.1", port), timeout=within) as sock:
        sock.sendall(data)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            responses.parser.feed_data(chunk)
    return responses.done


def tapped(stream: bytes) -> list[tuple[str, str, bytes]]:
    """The requests on one upstream connection as h11 reads them; fails on any byte that is
    not part of a whole request (a body not sent whole, bytes after a declined upgrade)."""
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(stream)
    conn.receive_data(b"")  # mend closed it, or will: what is here is all
    requests: list[tuple[str, str, bytes]] = []
    current: list[Any] = []
    upgrade = False
    while True:
        event = conn.next_event()
        if isinstance(event, h11.Request):
            current = [event.method.decode(), event.target.decode("latin-1"), b""]
            upgrade = any(name == b"upgrade" for name, _ in event.headers)
        elif isinstance(event, h11.Data):
            current[2] += event.data
        elif isinstance(event, h11.EndOfMessage):
            requests.append((current[0], current[1], current[2]))
            if upgrade:  # an upgrade, declined: that connection ends here
                assert conn.trailing_data[0] == b"", "bytes sent behind a declined upgrade"
                return requests
            conn.send(h11.Response(status_code=200, headers=[("Content-Length", "0")]))
            conn.send(h11.EndOfMessage())
            conn.start_next_cycle()
        elif event is h11.NEED_DATA or isinstance(event, h11.ConnectionClosed):
            assert conn.their_state in (h11.IDLE, h11.DONE, h11.CLOSED), "a request cut short"
            return requests
        else:
            raise AssertionError(f"unexpected {event!r}")


_canaries = itertools.count()


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_the_origin_parses_exactly_the_requests_mend_answered(stack: Stack, case: Case) -> None:
    """One reading of every request: the origin reads what mend answered from it and what the
    case means, mend's upstream bytes are whole requests, refusals send nothing, and the pool
    serves the next agent its own answer."""
    # (an origin logs a request before it answers: what mend answered is logged by now, and
    # the settling is for requests mend did not answer)
    before, offsets = len(stack.origin.parsed()), [len(s) for s in stack.tap.streams]
    answers = exchange(stack.mend.port, case.data)
    parsed = stack.origin.settled(quiet=0.15)[before:]
    # what mend sent during the case: on pooled connections from where they stood, and on new
    offsets += [0] * (len(stack.tap.streams) - len(offsets))
    sent = [bytes(s[offset:]) for s, offset in zip(stack.tap.streams, offsets, strict=True)]
    seen = [(p["method"], p["target"]) for p in parsed]
    assert ("GET", "/smuggled") not in seen
    assert seen == [(method, target) for method, target, _ in case.forwarded]
    if stack.origin.name != "nginx":  # nginx's log has no bodies
        assert [p["body"].encode("latin-1") for p in parsed] == [b for _, _, b in case.forwarded]
    from_origin = [a.headers["x-origin-target"] for a in answers if "x-origin-target" in a.headers]
    assert from_origin == [target for _, target, _ in case.forwarded]
    on_the_wire = [request for stream in sent if stream for request in tapped(stream)]
    assert sorted(on_the_wire) == sorted(case.forwarded)
    if case.refused is not None:
        assert answers[-1].status == case.refused, answers
        assert "x-error-code" in answers[-1].headers
        assert len(answers) == len(case.forwarded) + 1
    else:
        assert len(answers) == len(case.forwarded), answers
    canary = f"/canary-{next(_canaries)}"
    after = exchange(stack.mend.port, b"GET %b HTTP/1.1\r\n%b%b\r\n" % (canary.encode(), H, CLOSE))
    assert [a.headers.get("x-origin-target") for a in after] == [canary]
    assert [p["target"] for p in stack.origin.parsed()[before + len(parsed) :]] == [canary]
