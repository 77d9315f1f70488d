"""A success on its way back to the agent: the upstream's status, headers and bytes, with only the
changes nginx and Envoy make too (docs/contract.md §3, docs/http.md "What passes through
untouched").

Changed on every passed-through response: hop-by-hop headers dropped (``forward.end_to_end``),
redirect headers naming the upstream rewritten to name mend (``proxy/edge/redirect.py``),
the upstream's ``Server`` replaced by ``mend`` and the headers that name its software dropped
(nginx ``server_tokens``/``proxy_hide_header``, Envoy ``server_name``), ``X-Request-ID`` set to
the request's id. aiohttp adds a ``Date`` when the upstream sent none, as both proxies do; it
would also invent ``Content-Type: application/octet-stream`` for a body without one, which the
response classes here prevent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from proxy.edge.forward import end_to_end
from proxy.edge.rawhead import head_bytes, is_ascii
from proxy.edge.redirect import HEADERS as REDIRECT_HEADERS

#: A redirect header's value as the agent gets it: ``(name, value) -> value``
#: (``proxy/edge/redirect.py``); ``None`` where a route does not rewrite them.
Redirect = Callable[[str, str], str]
#: Response headers naming the upstream's software, dropped from every response.
BANNERS = ("server", "x-powered-by", "x-aspnet-version", "x-aspnetmvc-version", "x-sourcefiles")


def passthrough_headers(
    headers: CIMultiDictProxy[str], request_id: str, redirect: Redirect | None = None
) -> CIMultiDict[str]:
    out = end_to_end(headers, drop=BANNERS)
    out["Server"] = "mend"
    out["X-Request-ID"] = request_id
    if redirect is not None:
        for name in REDIRECT_HEADERS:
            if name in out:
                values = out.popall(name)
                for value in values:
                    out.add(name, redirect(name, value))
    return out


class _Verbatim:
    """What aiohttp's response classes change in the upstream's head, undone.

    - ``Content-Type`` is left out when the upstream sent none (RFC 9110 §8.3: a recipient may
      sniff; a proxy must not invent one).
    - Header bytes that are not UTF-8 (``filename=r\xe9sum\xe9.pdf`` from a latin-1 server)
      arrive as surrogate escapes, which aiohttp's header writer drops: such a head is written
      back byte for byte here. aiohttp has no option for either; both hooks are its response
      internals, covered by tests/edge/test_transparency.py.
    """

    untyped = False
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

    def __init__(self, *, status: int, reason: str | None, body: bytes, headers: Any) -> None:
        super().__init__(status=status, reason=reason, body=body, headers=headers)
        self.untyped = "Content-Type" not in headers


class PassedStream(_Verbatim, web.StreamResponse):
    """A success streamed as it arrives."""

    def __init__(self, *, status: int, reason: str | None, headers: Any) -> None:
        super().__init__(status=status, reason=reason, headers=headers)
        self.untyped = "Content-Type" not in headers
