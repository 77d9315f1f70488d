"""An agent's request head, as llhttp parsed it, made into the message aiohttp's request reads.

The proxy above reads requests through aiohttp's ``BaseRequest`` (its headers, URL, query and
body stream); this module builds the ``RawRequestMessage`` behind one exactly as aiohttp's own
parser does (the same URL forms, header bytes that are not UTF-8 kept as surrogate escapes), so
nothing above the edge can tell which parser read the bytes. No decompression: a proxy passes
an agent's ``Content-Encoding`` on with the bytes it names.
"""

from __future__ import annotations

from collections.abc import Callable

import httptools
from aiohttp.http import HttpVersion, HttpVersion10, HttpVersion11, RawRequestMessage
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from proxy.edge.failures import (
    HeadersTooLarge,
    MalformedRequest,
    ProxyFailure,
    UnsupportedTransferCoding,
    UriTooLong,
)
from proxy.edge.rawhead import decoded
from proxy.edge.server import framing
from proxy.edge.server.framing import Framing, Upgrade
from proxy.edge.server.limits import Limits

#: llhttp's version strings, as aiohttp's version tuples
VERSIONS = {"1.1": HttpVersion11, "1.0": HttpVersion10}

#: What an unparseable request is read as, for its refusal's envelope (aiohttp's ``ERROR``).
UNREADABLE = RawRequestMessage(
    "UNKNOWN",
    "/",
    HttpVersion10,
    CIMultiDictProxy(CIMultiDict()),
    (),
    True,
    None,
    False,
    False,
    URL("/"),
)


class Refuse(Exception):
    """Raised in llhttp's callbacks, it stops the parser: the request is refused with
    ``failure``."""

    def __init__(self, failure: ProxyFailure) -> None:
        super().__init__(str(failure))
        self.failure = failure


class Reading:
    """The head being read: its target and fields as llhttp hands them over, each bounded as it
    arrives (``Refuse`` past a bound), and the bytes it took so far (``size``)."""

    __slots__ = ("active", "limits", "raw", "size", "target")

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.active = False
        self.size = 0
        self.target = b""
        self.raw: list[tuple[bytes, bytes]] = []

    def begin(self) -> None:
        self.active, self.target, self.raw = True, b"", []

    def url(self, piece: bytes) -> None:
        self.target += piece
        if len(self.target) > self.limits.max_line:
            limit = self.limits.max_line
            raise Refuse(UriTooLong(f"request target over {limit} bytes", limit=limit))

    def field(self, name: bytes, value: bytes) -> None:
        limits = self.limits
        if len(name) + len(value) + 2 > limits.max_field:
            limit = limits.max_field
            raise Refuse(HeadersTooLarge(f"header field over {limit} bytes", limit=limit))
        self.raw.append((name, value))
        if len(self.raw) > limits.max_headers:
            raise Refuse(HeadersTooLarge("Too many headers", limit=limits.max_headers))


class InvalidTarget(ValueError):
    """A request target that is none of RFC 9112's four forms."""


def target_url(method: str, target: str) -> URL:
    """The request target as aiohttp's parser makes it (RFC 9112 §3.2): origin-form built from
    its parts, asterisk-form for OPTIONS, authority-form for CONNECT, else absolute-form."""
    if target.startswith("/"):
        path, _, fragment = target.partition("#")
        path, _, query = path.partition("?")
        return URL.build(path=path, query_string=query, fragment=fragment, encoded=True)
    try:
        if method == "CONNECT":
            url = URL.build(authority=target, encoded=True)
        elif target == "*" and method == "OPTIONS":
            return URL(target, encoded=True)
        elif "://" in target:
            url = URL(target, encoded=True)
        else:
            raise InvalidTarget(target[:200])
    except ValueError as exc:
        raise InvalidTarget(target[:200]) from exc
    if url.raw_host is None:
        raise InvalidTarget(target[:200])
    return url


def message(
    method: str,
    target: str,
    version: HttpVersion,
    headers: CIMultiDictProxy[str],
    raw: list[tuple[bytes, bytes]],
    read: Framing,
    *,
    keep_alive: bool,
) -> RawRequestMessage:
    """The parsed head as aiohttp's ``RawRequestMessage``, its framing as ``framing.py`` read
    it (an upgrade only when the tunnel relays it). A fragment, which no request target may
    hold (RFC 9112 §3.2), is dropped, as nginx does. Raises ``InvalidTarget``."""
    target = target.partition("#")[0]
    url = target_url(method, target)
    upgrade = read.following is Upgrade.RELAY
    return RawRequestMessage(
        method,
        target,
        version,
        headers,
        tuple(raw),
        not keep_alive,
        None,
        upgrade,
        read.chunked,
        url,
    )


def parsed(
    method: str,
    version: str,
    target: bytes,
    raw: list[tuple[bytes, bytes]],
    *,
    keep_alive: bool,
    upgrade: bool,
) -> tuple[RawRequestMessage, Framing]:
    """A head llhttp read (``upgrade``: it stopped there as at an upgrade) as its message and
    its framing. Raises the ``ProxyFailure`` refusing it: a version llhttp reads but mend does
    not (HTTP/0.9, HTTP/2.0 request lines), a target of no form, framing ``framing.py`` refuses."""
    if version not in VERSIONS:
        raise MalformedRequest(f"HTTP/{version} is not HTTP/1.0 or HTTP/1.1")
    headers = decoded(raw)
    try:
        read = framing.read(method, VERSIONS[version], headers, upgrade)
        text = target.decode("utf-8", "surrogateescape")
        made = message(method, text, VERSIONS[version], headers, raw, read, keep_alive=keep_alive)
    except InvalidTarget as exc:
        raise MalformedRequest(f"invalid request target {exc}") from None
    except framing.InvalidFraming as exc:
        raise MalformedRequest(str(exc)) from None
    except framing.UnsupportedCoding as exc:
        raise UnsupportedTransferCoding(str(exc)) from None
    return made, read


def refused(target: bytes, method: Callable[[], bytes], max_line: int) -> RawRequestMessage:
    """A refused request as far as it was read: its method and target once its request line
    was (the envelope's hint and the log line name them), else ``UNREADABLE``."""
    if not target or len(target) > max_line:
        return UNREADABLE
    try:
        name = method().decode("ascii")
        text = target.decode("utf-8", "surrogateescape")
        url = target_url(name, text)
    except (ValueError, httptools.HttpParserError):
        return UNREADABLE
    return UNREADABLE._replace(method=name, path=text, url=url)
