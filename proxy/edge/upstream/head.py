"""The request head as bytes: the method, target and header names and order exactly as given."""

from __future__ import annotations

from multidict import CIMultiDict

from proxy.edge.rawhead import CONTROL
from proxy.edge.upstream.errors import ProtocolError

#: Methods that carry no body by default: with none, aiohttp added no ``Content-Length: 0``.
BODILESS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
#: Control bytes no request line or header line may hold (header injection), CR and LF included.


def request_head(
    method: str,
    target: str,
    headers: CIMultiDict[str],
    *,
    host: str,
    body: bool,
) -> tuple[bytes, bool]:
    """The head of a request, and whether its body goes chunked.

    Header names keep their case and order as given (byte-exact: a non-UTF-8 byte the agent sent,
    held as a surrogate escape, is written back as that byte). Added only when missing: ``Host``
    (first), and the framing: ``Content-Length: 0`` for a bodiless POST, PUT, PATCH or DELETE as
    aiohttp did, ``Transfer-Encoding: chunked`` for a body of unknown length; a length the agent
    wrote with whitespace or leading zeros (``003 ``) goes in its canonical form (``3``).
    ``Expect`` is never sent: mend answered any 100-continue itself.
    """
    length = headers.get("Content-Length")
    if length is not None:  # mend's framing: the length llhttp read, in its canonical form
        canonical = length.strip(" \t").lstrip("0") or "0"
        if canonical != length:
            headers["Content-Length"] = canonical
    lines = [f"{method} {target} HTTP/1.1"]
    if "Host" not in headers:
        lines.append(f"Host: {host}")
    chunked = False
    if "Expect" in headers:  # dropped by the header hygiene already: one look-up, in C
        lines += [f"{n}: {v}" for n, v in headers.items() if n.lower() != "expect"]
    else:
        lines += [f"{n}: {v}" for n, v in headers.items()]
    if body:
        if "Content-Length" not in headers and "Transfer-Encoding" not in headers:
            lines.append("Transfer-Encoding: chunked")
            chunked = True
        else:
            chunked = "chunked" in headers.get("Transfer-Encoding", "").lower()
    elif method not in BODILESS and "Content-Length" not in headers:
        lines.append("Content-Length: 0")
    text = "\r\n".join(lines)
    # an injected CRLF shows as one more line break than lines; a lone CR or LF, as a control
    if text.count("\n") != len(lines) - 1 or CONTROL.search(text.replace("\r\n", " ")):
        raise ProtocolError("control character in the request head")
    return (text + "\r\n\r\n").encode("utf-8", "surrogateescape"), chunked


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body (never the last, empty one: ``LAST_CHUNK``)."""
    return b"%x\r\n%b\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"
