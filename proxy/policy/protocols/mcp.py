"""MCP (Model Context Protocol): JSON-RPC 2.0, plus tool results that are errors (docs/contract.md
§6).

A ``tools/call`` result with ``isError: true`` is an error the model reads: its text content is
matched against the rules (JSON in the text is parsed as the body; ``tool`` and ``rpc_method``
name the call), and it stays a result with the same id, its content the text rendering of the
envelope (the recovery plan, then the JSON line) and the envelope in ``_meta["mend/error"]``.
A successful result is never touched. Everything else is JSON-RPC, in JSON or in an event stream.

Detected by a JSON-RPC body calling an MCP method (``initialize``, ``server/discover``), or any
JSON-RPC body of a request carrying ``MCP-Protocol-Version``, ``Mcp-Session-Id`` or (2026-07-28)
``Mcp-Method``; a header alone names MCP only for a request without a body (the GET stream,
DELETE), never for a body that is not JSON-RPC.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from multidict import istr

from proxy.config.choices import ProtocolName, Rendering
from proxy.policy import json_depth
from proxy.policy.envelope.model import Envelope
from proxy.policy.exchange import NOT_JSON, Exchange
from proxy.policy.protocols import wrapped
from proxy.policy.protocols.base import Call, Inspection, Protocol, Unit
from proxy.policy.protocols.jsonrpc import SPEC_CODES, SSE, JsonRpc, RpcRequest, request_key
from proxy.policy.render.render import render

if TYPE_CHECKING:  # annotations only: the policy imports no aiohttp
    from aiohttp import web

#: Methods of the MCP specification (2025-03-26 to 2026-07-28) by name or prefix.
_METHODS = frozenset({"initialize", "ping"})
_PREFIXES = (
    "server/",  # 2026-07-28: server/discover
    "subscriptions/",
    "tools/",
    "resources/",
    "prompts/",
    "notifications/",
    "completion/",
    "logging/",
    "sampling/",
    "elicitation/",
    "roots/",
    "tasks/",
)
#: MCP's request headers, as ``istr`` so that a look-up skips case folding (every request asks).
_VERSION = istr("MCP-Protocol-Version")
_SESSION = istr("Mcp-Session-Id")
_METHOD = istr("Mcp-Method")  # 2026-07-28: the method, beside the body (no session id)
#: The ``_meta`` key the envelope travels under in a rewritten tool result.
META_KEY = "mend/error"


def is_mcp_method(method: str) -> bool:
    return method in _METHODS or method.startswith(_PREFIXES)


def tool_text(result: dict[str, Any]) -> str:
    """The text of a tool result's ``text`` content blocks, one per line."""
    content = result.get("content")
    if not isinstance(content, list):
        return ""
    return "\n".join(
        block["text"]
        for block in content
        if isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    )


def embedded_json(text: str) -> Any:
    """The JSON document a tool's error text is, or holds (``Error: {"detail": ...}``)."""
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        document = json_depth.loads(stripped)
        if document is not NOT_JSON:
            return document
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        return json_depth.loads(text[start : end + 1])
    return NOT_JSON


class Mcp(JsonRpc):
    name: ClassVar[ProtocolName] = ProtocolName.MCP
    signals: ClassVar[bool] = True
    #: MCP (streamable HTTP): a POST of notifications only is answered 202 Accepted, no body
    notification_status: ClassVar[int] = 202

    def signalled(self, request: web.BaseRequest) -> bool:
        headers = request.headers
        return _VERSION in headers or _SESSION in headers or _METHOD in headers

    def claims(self, call: Call) -> bool:
        """A JSON-RPC body calling an MCP method, or any JSON-RPC body of a request whose
        headers name MCP (one cut at the copy's cap included: it starts as JSON-RPC); a header
        on a body that is not JSON-RPC makes nothing MCP."""
        if not call.holds(b'"jsonrpc"'):
            return False
        rpc = self.request(call)
        if rpc is None:
            # a JSON-RPC body longer than the copy kept of it: the header's word is taken
            return call.hint is self and call.ended and not call.complete
        return call.hint is self or any(is_mcp_method(r.method) for r in rpc.requests)

    #: a JSON-RPC error body alone does not say MCP: the base's "no", so the detector skips it
    claims_response = Protocol.claims_response

    def inspects(self, call: Call, content_type: str) -> Inspection:
        """A request without a body (MCP's GET stream, DELETE) is MCP's only for an event
        stream; a JSON answer to one (a REST GET that carried an MCP header) streams through."""
        if call.tee is None and content_type != SSE:
            return Inspection.NONE
        return super().inspects(call, content_type)

    def may_hold_errors(self, raw: bytes) -> bool:
        return b'"error"' in raw or b'"isError"' in raw

    def _unit(
        self, exchange: Exchange, slot: int, item: dict[str, Any], request: RpcRequest | None
    ) -> Unit | None:
        unit = super()._unit(exchange, slot, item, request)
        if unit is None:
            unit = self._result_unit(exchange, slot, item, request)
        if unit is None or unit.exchange.rpc_method != "tools/call":
            return unit
        if exchange.status is not None and 400 <= exchange.status < 500:
            return unit  # the transport's own answer (a session, a version), not the tool's
        structured = unit.source if "result" in item else None
        answer = wrapped.reported(unit.exchange.text, structured)
        if answer is None:
            return unit
        reported = wrapped.backend_exchange(unit.exchange, answer)
        return replace(unit, reported=reported, quotes=answer.quotes)

    def _result_unit(
        self, exchange: Exchange, slot: int, item: dict[str, Any], request: RpcRequest | None
    ) -> Unit | None:
        """A ``tools/call`` result with ``isError``: its text read as the body."""
        result = item.get("result")
        if not isinstance(result, dict) or result.get("isError") is not True:
            return None  # a successful result is never touched
        if request is not None and request.method != "tools/call":
            return None
        text = tool_text(result)
        narrowed = self._narrowed(exchange, embedded_json(text), text, request)
        narrowed.rpc_method = "tools/call"
        key = request_key(request)
        return Unit(narrowed, slot, key, source=result.get("structuredContent"))

    def _error_text(self, item: dict[str, Any], request: RpcRequest | None) -> str:
        """A tool's failure as a JSON-RPC error: its message is what the tool said, read by the
        mcp pack's text rules as an ``isError`` result's text is."""
        message = item["error"].get("message")
        if request is not None and request.method == "tools/call" and isinstance(message, str):
            return message
        return super()._error_text(item, request)

    def notification_answer(self, status: int) -> int:
        """Streamable HTTP: a notification the server could not accept gets an HTTP error
        status and no body; one it accepted, 202."""
        return status if status >= 400 else self.notification_status

    def _rendered(
        self,
        call: Call,
        unit: Unit,
        item: dict[str, Any],
        envelope: Envelope,
        data: dict[str, Any],
        id_: Any,
    ) -> dict[str, Any]:
        tool = unit.exchange.tool or ""
        if "error" in item:
            if not tool_failure(
                call, unit.exchange.rpc_method, unit.exchange.status, item["error"]
            ):
                return super()._rendered(call, unit, item, envelope, data, id_)
            result = failed_result(call, envelope, data, tool)
            return {"jsonrpc": "2.0", "id": id_, "result": result}
        text = render(envelope, Rendering.TEXT, envelope.upstream_status or 200, tool=tool)[0]
        result = rewritten_result(item["result"], text, data, unit.kept)
        return {**item, "id": id_, "result": result}

    def _whole_item(
        self, call: Call, request: RpcRequest, envelope: Envelope, data: dict[str, Any], status: int
    ) -> dict[str, Any]:
        """A ``tools/call`` whose answer was no JSON-RPC at all (an HTML 502, mend's own
        ``UPSTREAM_UNREACHABLE``) is the tool's failure too; a 4xx stays the transport's."""
        if not tool_failure(call, request.method, status, None):
            return super()._whole_item(call, request, envelope, data, status)
        result = failed_result(call, envelope, data, request.tool or "")
        return {"jsonrpc": "2.0", "id": request.id, "result": result}


#: JSON-RPC codes that are the protocol's own answer to a ``tools/call`` (it could not be read,
#: or the server has no tools), not the tool's failure: they stay errors (docs/contract.md §6)
PROTOCOL_CODES = frozenset({-32700, -32600, -32601})


def tool_failure(call: Call, method: str | None, status: int | None, error: Any) -> bool:
    """Whether a failure answering ``method`` reaches the model as an ``isError`` result: a
    ``tools/call`` on a route that does not keep protocol errors (``tool_errors: error``),
    unless the error is the protocol's own (``PROTOCOL_CODES``, the codes the MCP specification
    allocates, ``SPEC_CODES``) or the transport's (a 4xx: a session it does not know, a version
    it does not speak, an authorization challenge)."""
    if method != "tools/call" or call.keep_rpc_errors:
        return False
    if status is not None and 400 <= status < 500:
        return False
    code = error.get("code") if isinstance(error, dict) else None
    return not (isinstance(code, int) and (code in PROTOCOL_CODES or code in SPEC_CODES))


#: the first revision whose results must say ``resultType`` (2026-07-28: "complete")
RESULT_TYPES_FROM = "2026-07-28"


def failed_result(
    call: Call, envelope: Envelope, data: dict[str, Any], tool: str
) -> dict[str, Any]:
    """A tool's failure as the result the model reads: the recovery plan as its text, the
    envelope in ``_meta["mend/error"]`` (docs/contract.md §6); ``resultType`` where the revision the
    call speaks requires one."""
    text = render(envelope, Rendering.TEXT, envelope.upstream_status or 200, tool=tool)[0]
    sent = {"resultType": "complete"} if call.mcp_version >= RESULT_TYPES_FROM else {}
    return rewritten_result(sent, text, data, None)


def rewritten_result(
    result: dict[str, Any], text: str | bytes, envelope: dict[str, Any], structured: Any
) -> dict[str, Any]:
    """A tool result that is an error, as the model gets it (docs/contract.md §6): every member the
    upstream sent kept in its place (``resultType``, ``_meta`` and its keys, extensions'), only
    ``content`` replaced by ``text`` (the recovery plan), ``structuredContent`` by its redacted
    copy (dropped when there is none), and the envelope added to ``_meta`` as ``mend/error``."""
    out: dict[str, Any] = {}
    for key, value in result.items():
        if key == "structuredContent":
            if structured is not None:
                out[key] = structured
        elif key != "_meta":
            out[key] = value
    body = text.decode("utf-8") if isinstance(text, bytes) else text
    out["content"] = [{"type": "text", "text": body}]
    out["isError"] = True
    meta = result.get("_meta")
    out["_meta"] = {**(meta if isinstance(meta, dict) else {}), META_KEY: envelope}
    return out
