"""A success on its way back to the agent: the upstream's status, headers and bytes, with only the
changes nginx and Envoy make too (docs/contract.md §3, docs/http.md "What passes through
untouched").

Changed on every passed-through response: hop-by-hop headers dropped (``forward.end_to_end``),
redirect headers naming the upstream rewritten to name mend (``proxy/edge/redirect.py``),
the upstream's ``Server`` replaced by ``mend`` and the headers that name its software dropped
(nginx ``server_tokens``/``proxy_hide_header``, Envoy ``server_name``), ``X-Request-ID`` set to
the request's id. A value replaced keeps its header's place and the name's spelling
(``proxy/edge/names.py``); so do the framing fields aiohttp writes. aiohttp adds a ``Date`` when
the upstream sent none, as both proxies do; it would also invent ``Content-Type:
application/octet-stream`` for a body without one, which the response classes here prevent.
docs/headers.md is the whole list.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from proxy.edge.forward import end_to_end
from proxy.edge.names import USUAL, respelt
from proxy.edge.rawhead import head_bytes, is_ascii
from proxy.edge.redirect import HEADERS as REDIRECT_HEADERS

#: A redirect header's value as the agent gets it: ``(name, value) -> value``
#: (``proxy/edge/redirect.py``); ``None`` where a route does not rewrite them.
Redirect = Callable[[str, str], str]
#: Headers mend adds to a response it passes (``X-Mend-Attempt-Count``: docs/retries.md).
Added = tuple[tuple[str, str], ...]
#: Response headers naming the upstream's software, dropped from every response (``Server``
#: is not dropped but replaced, in its place).
BANNERS = ("x-powered-by", "x-aspnet-version", "x-aspnetmvc-version", "x-sourcefiles")


def passthrough_headers(
    headers: CIMultiDictProxy[str],
    request_id: str,
    redirect: Redirect | None = None,
    added: Added = (),
) -> CIMultiDict[str]:
    """The upstream's end-to-end headers, less its banners, with ``Server: mend``, the request
    id, mend's ``added`` ones and rewritten redirect headers; each value replaced where the
    upstream had it."""
    out = end_to_end(headers, drop=BANNERS)
    out["Server"] = "mend"  # (one value, in the first one's place: a banner sent twice is one)
    out["X-Request-ID"] = request_id
    for name, value in added:
        out[name] = value
    if redirect is not None:
        for name in REDIRECT_HEADERS:
            if name in out:
                rewrite(out, name, redirect)
    return out


def rewrite(headers: CIMultiDict[str], name: str, redirect: Redirect) -> None:
    """Each value of ``name`` as ``redirect`` writes it, in its place (nearly always one)."""
    values = headers.getall(name)
    if len(values) == 1:
        headers[name] = redirect(name, values[0])
        return
    kept = [(n, v) for n, v in headers.items()]
    headers.clear()
    for n, v in kept:
        headers.add(n, redirect(n, v) if n.lower() == name.lower() else v)


class _Verbatim:
    """What aiohttp's response classes change in the upstream's head, undone.

    - ``Content-Type`` is left out when the upstream sent none (RFC 9110 §8.3: a recipient may
      sniff; a proxy must not invent one).
    - Names the upstream spelt its own way (``content-length``) keep its spelling where aiohttp
      or mend wrote the field anew (``spelt``).
    - Header bytes that are not UTF-8 (``filename=r\xe9sum\xe9.pdf`` from a latin-1 server)
      arrive as surrogate escapes, which aiohttp's header writer drops: such a head is written
      back byte for byte here. aiohttp has no option for either; both hooks are its response
      internals, covered by tests/edge/test_transparency.py.
    """

    untyped = False
    #: names the upstream spelt its own way, put back once aiohttp has written its own
    #: (``proxy/edge/names.py``)
    spelt: Mapping[str, str] = USUAL
    _headers: Any
    _req: web.BaseRequest | None
    _payload_writer: Any
    _send_headers_immediately: bool
    status: int
    reason: str

    async def _prepare_headers(self) -> None:
        await super()._prepare_headers()  # type: ignore[misc]
        if self.untyped:
            self._headers.popall("Content-Type", None)
        self._headers = respelt(self._headers, self.spelt)

    async def _write_headers(self) -> None:
        if is_ascii(self._headers):
            await super()._write_headers()  # type: ignore[misc]
            return
        request, writer = self._req, self._payload_writer
        assert request is not None
        assert writer is not None
        status_line = f"HTTP/{request.version[0]}.{request.version[1]} {self.status} {self.reason}"
        writer._headers_buf = head_bytes(status_line, self._headers)
        writer._headers_written = False
        if self._send_headers_immediately:
            writer.send_headers()


class PassedResponse(_Verbatim, web.Response):
    """A small success, sent in one write."""

    def __init__(
        self,
        *,
        status: int,
        reason: str | None,
        body: bytes,
        headers: Any,
        spelt: Mapping[str, str] = USUAL,
    ) -> None:
        super().__init__(status=status, reason=reason, body=body, headers=headers)
        self.untyped = "Content-Type" not in headers
        self.spelt = spelt


class PassedStream(_Verbatim, web.StreamResponse):
    """A success streamed as it arrives."""

    def __init__(
        self, *, status: int, reason: str | None, headers: Any, spelt: Mapping[str, str] = USUAL
    ) -> None:
        super().__init__(status=status, reason=reason, headers=headers)
        self.untyped = "Content-Type" not in headers
        self.spelt = spelt


class EnvelopeResponse(_Verbatim, web.Response):
    """An envelope: its own body and type, under the names the upstream spelt
    (``proxy/runtime/envelope_steps.py``)."""

    def __init__(
        self, *, status: int, body: bytes, headers: Any, spelt: Mapping[str, str] = USUAL
    ) -> None:
        super().__init__(status=status, body=body, headers=headers)
        self.spelt = spelt
