"""A success on its way back to the agent: the upstream's status, headers and bytes, with only the
changes nginx and Envoy make too (CONTRACT §3, README "What passes through untouched").

Changed on every passed-through response: hop-by-hop headers dropped (``forward.end_to_end``),
the upstream's ``Server`` replaced by ``mend`` and the headers that name its software dropped
(nginx ``server_tokens``/``proxy_hide_header``, Envoy ``server_name``), ``X-Request-ID`` set to
the request's id. aiohttp adds a ``Date`` when the upstream sent none, as both proxies do; it
would also invent ``Content-Type: application/octet-stream`` for a body without one, which the
response classes here prevent.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from proxy.forward import end_to_end

#: Response headers naming the upstream's software, dropped from every response.
BANNERS = ("server", "x-powered-by", "x-aspnet-version", "x-aspnetmvc-version", "x-sourcefiles")


def passthrough_headers(headers: CIMultiDictProxy[str], request_id: str) -> CIMultiDict[str]:
    out = end_to_end(headers, drop=BANNERS)
    out["Server"] = "mend"
    out["X-Request-ID"] = request_id
    return out


class _Untyped:
    """Leaves ``Content-Type`` out when the upstream sent none (RFC 9110 §8.3: a recipient may
    sniff; a proxy must not invent one)."""

    untyped = False

    async def _prepare_headers(self) -> None:
        await super()._prepare_headers()  # type: ignore[misc]
        if self.untyped:
            self._headers.popall("Content-Type", None)  # type: ignore[attr-defined]


class PassedResponse(_Untyped, web.Response):
    """A small success, sent in one write."""

    def __init__(self, *, status: int, reason: str | None, body: bytes, headers: Any) -> None:
        super().__init__(status=status, reason=reason, body=body, headers=headers)
        self.untyped = "Content-Type" not in headers


class PassedStream(_Untyped, web.StreamResponse):
    """A success streamed as it arrives."""

    def __init__(self, *, status: int, reason: str | None, headers: Any) -> None:
        super().__init__(status=status, reason=reason, headers=headers)
        self.untyped = "Content-Type" not in headers
