"""mend's one reading of a request's framing (``proxy/edge/server/framing.py``), rule by rule.
The differential suite (``tests/hostile/test_smuggling.py``) sends the same through mend to real
origins; these pin each rule's reading."""

from __future__ import annotations

import httptools
import pytest
from aiohttp.http import HttpVersion10, HttpVersion11
from multidict import CIMultiDict, CIMultiDictProxy

from proxy.edge.server import framing
from proxy.edge.server.framing import Upgrade


def _headers(*pairs: tuple[str, str]) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict(pairs))


@pytest.mark.parametrize(
    "fields",
    [("chunked",), ("Chunked",), (" chunked\t",), (", chunked",), ("chunked,",)],
)
def test_chunked_alone_is_chunked_whatever_its_case_and_list_whitespace(
    fields: tuple[str, ...],
) -> None:
    """RFC 9110's list syntax: case, OWS (space and tab) and empty members do not matter."""
    headers = _headers(*(("Transfer-Encoding", f) for f in fields))
    assert framing.chunked(HttpVersion11, headers)


@pytest.mark.parametrize("fields", [("gzip, chunked",), ("gzip", "chunked"), ("chunked, chunked",)])
def test_another_coding_before_chunked_is_not_implemented(fields: tuple[str, ...]) -> None:
    """A coding besides chunked is refused (501), never dropped while the body is re-chunked."""
    headers = _headers(*(("Transfer-Encoding", f) for f in fields))
    with pytest.raises(framing.UnsupportedCoding):
        framing.chunked(HttpVersion11, headers)


@pytest.mark.parametrize("field", ["xchunked", "chunked, gzip", "identity", ",", "chunked\xa0"])
def test_a_last_coding_that_is_not_chunked_leaves_the_length_unknown(field: str) -> None:
    """RFC 9112 §6.3: the body's length cannot be known (400); a no-break space is no OWS."""
    with pytest.raises(framing.InvalidFraming):
        framing.chunked(HttpVersion11, _headers(("Transfer-Encoding", field)))


def test_transfer_encoding_in_an_http_1_0_request_is_faulty_framing() -> None:
    """RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding is treated as faulty."""
    with pytest.raises(framing.InvalidFraming):
        framing.chunked(HttpVersion10, _headers(("Transfer-Encoding", "chunked")))


@pytest.mark.parametrize(
    ("length", "body"), [("0", False), ("000", False), ("3", True), ("03", True)]
)
def test_a_body_follows_a_length_other_than_zero(length: str, body: bool) -> None:
    """``Content-Length: 000`` frames no body, as llhttp reads it; ``03`` frames three bytes."""
    assert framing.has_body(_headers(("Content-Length", length)), False) is body


WS = (("Upgrade", "websocket"), ("Connection", "Upgrade"))


@pytest.mark.parametrize(
    ("method", "headers", "read_as_upgrade", "body", "following"),
    [
        ("GET", (), False, False, Upgrade.NONE),
        ("GET", WS, True, False, Upgrade.RELAY),
        ("POST", (("Upgrade", "h2c"), ("Connection", "Upgrade")), True, True, Upgrade.PLAIN),
        ("CONNECT", (), True, False, Upgrade.CONNECT),
    ],
    ids=["plain", "websocket", "h2c-with-a-body", "connect"],
)
def test_what_follows_an_upgrade_head(
    method: str,
    headers: tuple[tuple[str, str], ...],
    read_as_upgrade: bool,
    body: bool,
    following: Upgrade,
) -> None:
    """Only a WebSocket handshake is relayed; another upgrade is a plain request to mend."""
    assert framing.upgrade(method, _headers(*headers), read_as_upgrade, body) is following


def test_a_websocket_upgrade_with_a_body_is_refused() -> None:
    """Origins disagree on a body sent with a handshake (h11 reads it, llhttp skips it)."""
    with pytest.raises(framing.InvalidFraming):
        framing.upgrade("GET", _headers(*WS), True, True)


def test_an_upgrade_llhttp_does_not_read_as_one_is_refused() -> None:
    """Were the tunnel to relay what llhttp parsed on as HTTP, the readings would differ."""
    with pytest.raises(framing.InvalidFraming):
        framing.upgrade("GET", _headers(*WS), False, False)


class _Body:
    def __init__(self) -> None:
        self.body, self.done, self.urls = b"", 0, list[bytes]()

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.done += 1

    def on_url(self, url: bytes) -> None:
        self.urls.append(url)


@pytest.mark.parametrize(
    ("fields", "rest", "body"),
    [
        ([(b"Content-Length", b"5")], b"helloGET /next HTTP/1.1\r\n\r\n", b"hello"),
        (
            [(b"Transfer-Encoding", b"chunked")],
            b"2\r\nhe\r\n3\r\nllo\r\n0\r\n\r\nGET /next HTTP/1.1\r\n\r\n",
            b"hello",
        ),
    ],
    ids=["length", "chunked"],
)
def test_the_framing_head_frames_the_body_as_the_request_said(
    fields: list[tuple[bytes, bytes]], rest: bytes, body: bytes
) -> None:
    """A fresh llhttp parser told only the framing fields reads the body and then the next
    request from exactly where the request's own head said."""
    raw = [(b"Host", b"a"), (b"Upgrade", b"h2c"), *fields]
    seen = _Body()
    parser = httptools.HttpRequestParser(seen)
    parser.feed_data(framing.framing_head("POST", raw, keep_alive=True) + rest)
    assert (seen.body, seen.done) == (body, 2)
    assert seen.urls == [b"/", b"/next"]  # the framing head's target, then the next request's
