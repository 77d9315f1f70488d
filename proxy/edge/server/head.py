"""An agent's request head, as llhttp parsed it, made into the message aiohttp's request reads.

The proxy above reads requests through aiohttp's ``BaseRequest`` (its headers, URL, query and
body stream); this module builds the ``RawRequestMessage`` behind one exactly as aiohttp's own
parser does (the same URL forms, header bytes that are not UTF-8 kept as surrogate escapes), so
nothing above the edge can tell which parser read the bytes. No decompression: a proxy passes
an agent's ``Content-Encoding`` on with the bytes it names.
"""

from __future__ import annotations

from aiohttp.http import HttpVersion, HttpVersion10, HttpVersion11, RawRequestMessage
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from proxy.edge.server.framing import Framing, Upgrade

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
