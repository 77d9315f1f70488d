"""Which protocol a request speaks: the route's, else (``auto``) the first that recognises it.

``Detector.call`` runs on every request of a route that is not ``http`` and reads only what is
already parsed: two header look-ups (MCP), the method and, on a GET with ``query=``, the query
(GraphQL). A request with a JSON body gets a ``Call`` whose ``tee`` keeps the body's first 64 KiB
as it streams upstream; nothing is parsed then. ``resolve`` decides from the body only when a
response needs the protocol (an error, or a success the protocol inspects), and ``for_response``
also asks the response (a JSON-RPC error body, ``application/graphql-response+json``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from proxy.config.choices import ProtocolName
from proxy.policy.protocols.base import TEE_BYTES, Call, Protocol, is_json_type
from proxy.policy.protocols.graphql import GraphQL
from proxy.policy.protocols.jsonrpc import JsonRpc
from proxy.policy.protocols.mcp import Mcp

if TYPE_CHECKING:  # annotations only: the policy imports no aiohttp
    from aiohttp import web

#: the request headers that name MCP (lowercase), for a request described by hand
_MCP_HEADERS = frozenset({"mcp-protocol-version", "mcp-session-id", "mcp-method"})


def _holds_any(data: bytearray, markers: tuple[bytes, ...]) -> bool:
    # a loop, not any(<generator>), and find, not ``in``: each about halves the cost (timeit)
    for marker in markers:  # noqa: SIM110
        if data.find(marker) >= 0:
            return True
    return False


def default_protocols() -> tuple[Protocol, ...]:
    """Every protocol mend speaks, in the order ``auto`` asks them (MCP before JSON-RPC: an MCP
    body is a JSON-RPC body)."""
    return (Mcp(), JsonRpc(), GraphQL())


class Detector:
    def __init__(self, protocols: Sequence[Protocol], tee_bytes: int = TEE_BYTES) -> None:
        self.protocols = tuple(protocols)
        self.by_name: dict[ProtocolName, Protocol] = {p.name: p for p in self.protocols}
        self.tee_bytes = tee_bytes
        self._signalling = tuple(p for p in self.protocols if p.signals)
        self._markers = tuple(dict.fromkeys(m for p in self.protocols for m in p.markers))
        self._responders = tuple(
            p for p in self.protocols if type(p).claims_response is not Protocol.claims_response
        )

    def call(self, request: web.BaseRequest, mode: ProtocolName) -> Call | None:
        """The request's ``Call``, or ``None`` for a request no protocol can be spoken in (an
        ``http`` route, or an ``auto`` one with no signal and no JSON body)."""
        if mode is ProtocolName.HTTP:
            return None
        protocol = None if mode is ProtocolName.AUTO else self.by_name[mode]
        hint = None
        body = request.body_exists
        if protocol is None:
            for candidate in self._signalling:
                if candidate.signalled(request):
                    hint = candidate
                    break
            if hint is not None and not body:
                protocol = hint  # nothing else to go by (MCP's GET stream, DELETE)
        tee = body and (
            protocol is not None or hint is not None or is_json_type(request.content_type)
        )
        if protocol is None and not tee:
            return None
        method = request.method
        headers = request.headers
        call = Call(
            method,
            request.query_string if method == "GET" else "",
            headers.get("Accept", ""),
            protocol=protocol,
            tee=bytearray() if tee else None,
            cap=self.tee_bytes,
            hint=hint,
        )
        call.mcp_version = headers.get("MCP-Protocol-Version", "")
        return call

    def make(
        self,
        *,
        method: str,
        query_string: str = "",
        accept: str = "",
        protocol: Protocol | None = None,
        tee: bool = False,
    ) -> Call:
        """A ``Call`` for a request described by hand (``mend test``, ``mend explain``)."""
        return Call(
            method,
            query_string,
            accept,
            protocol=protocol,
            tee=bytearray() if tee else None,
            cap=self.tee_bytes,
        )

    def offline(
        self,
        mode: ProtocolName,
        *,
        method: str,
        query_string: str = "",
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
    ) -> Call | None:
        """The ``Call`` the proxy would have for a request described by hand (``mend test``,
        ``mend explain``) on a route of protocol ``mode``."""
        if mode is ProtocolName.HTTP:
            return None
        lowered = {k.lower(): v for k, v in (headers or {}).items()}
        protocol = self.by_name.get(mode)
        hint = None
        if protocol is None and not _MCP_HEADERS.isdisjoint(lowered):
            hint = self.by_name.get(ProtocolName.MCP)
            protocol = hint if body is None else None
        call = self.make(
            method=method.upper(),
            query_string=query_string,
            accept=lowered.get("accept", ""),
            protocol=protocol,
            tee=body is not None,
        )
        call.hint = hint
        if body is not None:
            call.feed(body)
            call.end()
        return call

    def resolve(self, call: Call) -> Protocol | None:
        """The call's protocol: forced or signalled, else the first that claims its body."""
        if call.decided or call.protocol is not None:
            return call.protocol
        tee = call.tee
        if tee is not None and not call.ended:
            return None  # the body is still arriving: undecided, not decided against
        call.decided = True
        if tee is not None and not _holds_any(tee, self._markers):
            return None  # no protocol's word in the body: no claims asked, nothing parsed
        for protocol in self.protocols:
            if protocol.claims(call):
                call.protocol = protocol
                break
        return call.protocol

    def for_response(self, call: Call, content_type: str, document: Any) -> Protocol | None:
        """``resolve``, else the protocol whose own response this is."""
        found = self.resolve(call)
        if found is not None:
            return found
        for protocol in self._responders:
            if protocol.claims_response(content_type, document):
                call.protocol = protocol
                return protocol
        return None
