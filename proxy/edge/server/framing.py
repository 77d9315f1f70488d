"""Where an agent's request ends and the next begins: mend's one reading, decided from the head.

llhttp (``httptools``) reads every byte an agent sends and frames every body. What this module
decides from the head it read comes before anything goes upstream (the connection starts a
request only once llhttp has accepted its head, its post-head checks included), so the request
mend checks is the request the upstream is sent, and the upstream is sent mend's own framing of
it (``proxy/edge/upstream/head.py``), never the agent's words for it:

- **Transfer codings**: ``chunked`` alone, the only one mend implements. Another coding before it
  (``gzip, chunked``) is refused with 501, as nginx does: rewritten, the origin would read the
  coded bytes as the body. A last coding that is not ``chunked`` leaves the length unknown (RFC
  9112 §6.3, 400), and so does ``Transfer-Encoding`` in an HTTP/1.0 request (§6.1). What llhttp
  itself refuses (``chunked`` with ``Content-Length``, ``chunked<TAB>``) is refused by llhttp.
- **Upgrades**: llhttp stops at an upgrade request's head and skips its body. Only a WebSocket
  handshake is relayed (``proxy/edge/tunnel.py``), and only without a body: RFC 6455's handshake
  is a GET, and origins disagree on a body sent with one (h11 reads it, llhttp-based servers
  take it for frames), so one is refused. Any other upgrade (``h2c``) is a plain request to mend:
  its body is framed by a fresh parser told the request's own framing fields (``framing_head``),
  and what follows is the next request. An ``Upgrade`` that llhttp does not read as one but the
  tunnel would is refused: the two readings must not differ. Nothing after a CONNECT is read.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

from aiohttp.http import HttpVersion, HttpVersion10
from multidict import CIMultiDictProxy

from proxy.edge.forward import wants_upgrade


class InvalidFraming(ValueError):
    """A request body whose length cannot be known (RFC 9112 §6.3: a 400)."""


class UnsupportedCoding(ValueError):
    """A transfer coding mend does not implement (RFC 9112 §6.1: a 501)."""


class Upgrade(Enum):
    """What follows an upgrade request's head, once llhttp has stopped there."""

    #: not an upgrade: llhttp reads on
    NONE = "none"
    #: a WebSocket handshake: the bytes after it wait for its answer (a tunnel, or HTTP again)
    RELAY = "relay"
    #: an upgrade mend does not make: a plain request, its body framed anew (``framing_head``)
    PLAIN = "plain"
    #: CONNECT (refused by the proxy): nothing after it is read
    CONNECT = "connect"


class Framing(NamedTuple):
    """A request's framing, as mend reads its head (``read``)."""

    chunked: bool
    #: llhttp frames a body after the head (a length other than zero, or chunks)
    body: bool
    following: Upgrade


def read(
    method: str, version: HttpVersion, headers: CIMultiDictProxy[str], read_as_upgrade: bool
) -> Framing:
    """The framing of a head llhttp read (``read_as_upgrade``: llhttp stopped at it as an
    upgrade). Raises ``InvalidFraming`` or ``UnsupportedCoding``."""
    is_chunked = chunked(version, headers)
    body = has_body(headers, is_chunked)
    return Framing(is_chunked, body, upgrade(method, headers, read_as_upgrade, body))


#: the header fields that frame a body, as llhttp reads them
FRAMING_FIELDS = frozenset({b"content-length", b"transfer-encoding"})


def chunked(version: HttpVersion, headers: CIMultiDictProxy[str]) -> bool:
    """Whether the body is chunked. Raises ``InvalidFraming`` or ``UnsupportedCoding``."""
    fields = headers.getall("Transfer-Encoding", ())
    if not fields:
        return False
    if version == HttpVersion10:
        raise InvalidFraming("Transfer-Encoding in an HTTP/1.0 request")
    # RFC 9110 §5.6.1: a list, OWS (space, tab) around its members, empty members ignored
    codings = [c.strip(" \t").lower() for field in fields for c in field.split(",")]
    codings = [c for c in codings if c]
    if not codings or codings[-1] != "chunked":
        raise InvalidFraming("Transfer-Encoding without chunked last")
    if len(codings) > 1:
        listed = ", ".join(codings)
        raise UnsupportedCoding(f"Transfer-Encoding {listed!r}: mend reads chunked alone")
    return True


def has_body(headers: CIMultiDictProxy[str], is_chunked: bool) -> bool:
    """Whether llhttp will frame a body after the head (a length llhttp accepted, not zero)."""
    if is_chunked:
        return True
    length = headers.get("Content-Length")
    return length is not None and length.strip(" \t").lstrip("0") != ""


def upgrade(
    method: str, headers: CIMultiDictProxy[str], read_as_upgrade: bool, body: bool
) -> Upgrade:
    """What the bytes after this head are, given llhttp's reading (``read_as_upgrade``).
    Raises ``InvalidFraming`` for a reading mend and llhttp would not share."""
    relayed = wants_upgrade(headers)
    if not read_as_upgrade:
        if relayed:
            raise InvalidFraming("an Upgrade header llhttp does not read as an upgrade")
        return Upgrade.NONE
    if method == "CONNECT":
        return Upgrade.CONNECT
    if not relayed:
        return Upgrade.PLAIN
    if body:
        raise InvalidFraming("a WebSocket upgrade request with a body")
    return Upgrade.RELAY


def framing_head(method: str, raw: list[tuple[bytes, bytes]], keep_alive: bool) -> bytes:
    """A head with only the request's own framing fields, byte for byte: fed to a fresh llhttp
    parser, it frames the body that follows exactly as this request's head says, by the same
    parser's rules, and reads on from its end."""
    lines = [f"{method} / HTTP/1.1".encode("ascii")]
    lines += [name + b": " + value for name, value in raw if name.lower() in FRAMING_FIELDS]
    if not keep_alive:
        lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n"
