"""JSON-RPC 2.0: an error goes back as a JSON-RPC response with the request's id (docs/contract.md
§6).

Units are the response objects that carry an ``error`` member, each matched on its own (a batch
element by element, in the upstream's order); the rules see the one response object. Each comes
back as ``{"jsonrpc": "2.0", "id": <its id>, "error": {"code", "message", "data"}}``: the upstream's
numeric code when it sent one, else one chosen by category; the envelope's message and hint as the
message; the envelope as ``data`` (beside the upstream's own ``data`` members when its code is
one the MCP specification defines, such as -32022's ``supported`` versions). An error that is
not a JSON-RPC response (an HTML 502, mend's own ``UPSTREAM_UNREACHABLE``) is answered for every
request of the call that has an id; a call made only of notifications gets an empty answer,
which no client parses.

Every answer carries the id of the request it answers (a transport error's stand-in id, ``null``
or the SDK's ``"server-error"``, is replaced by the call's own when it made one request). An
answer keeps an upstream 4xx (the transport's own: version negotiation, discovery, session
errors), which clients read; anything else is HTTP 200 with the error in the body and the
upstream's status in ``X-Upstream-Status``, since MCP's 1.x clients read no 5xx body. A call made
only of notifications gets no body.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Final

from proxy.config.choices import ProtocolName
from proxy.policy.envelope.model import Category, Envelope
from proxy.policy.exchange import Exchange
from proxy.policy.protocols.base import (
    Call,
    Inspection,
    Protocol,
    Rendered,
    Unit,
    is_json_type,
    narrowed,
)
from proxy.policy.render.jsontext import json_bytes as dumps


class _NoId:
    """Sentinel: a request without an ``id`` member is a notification (``null`` is an id)."""

    def __repr__(self) -> str:
        return "NO_ID"


NO_ID: Final = _NoId()

JSON = "application/json"
SSE = "text/event-stream"

#: The JSON-RPC code for an envelope when the upstream gave none (JSON-RPC 2.0 §5.1).
INTERNAL_ERROR = -32603
INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
#: Implementation-defined server error (-32000 to -32099): auth, permission, rate limit, conflict.
SERVER_ERROR = -32000
CODES: Mapping[Category, int] = {
    Category.INTERNAL: INTERNAL_ERROR,
    Category.UNAVAILABLE: INTERNAL_ERROR,
    Category.TIMEOUT: INTERNAL_ERROR,
    Category.DEPENDENCY: INTERNAL_ERROR,
    Category.VALIDATION: INVALID_PARAMS,
    Category.PAYLOAD_TOO_LARGE: INVALID_PARAMS,
    Category.UNSUPPORTED_MEDIA: INVALID_PARAMS,
    Category.NOT_FOUND: METHOD_NOT_FOUND,
    Category.METHOD_NOT_ALLOWED: METHOD_NOT_FOUND,
}


@dataclass(frozen=True, slots=True)
class RpcRequest:
    """One JSON-RPC request object of a call."""

    id: Any  # NO_ID for a notification
    method: str
    params: Any = None

    @property
    def notification(self) -> bool:
        return self.id is NO_ID

    @property
    def tool(self) -> str | None:
        """The tool an MCP ``tools/call`` names."""
        if self.method != "tools/call" or not isinstance(self.params, dict):
            return None
        name = self.params.get("name")
        return name if isinstance(name, str) else None

    @property
    def arguments(self) -> dict[str, Any] | None:
        """The arguments of an MCP ``tools/call``, as the model wrote them."""
        if self.tool is None:
            return None
        arguments = self.params.get("arguments")
        return arguments if isinstance(arguments, dict) else None


@dataclass(frozen=True, slots=True)
class RpcCall:
    """A JSON-RPC request body: one request, or a batch."""

    requests: tuple[RpcRequest, ...]
    batch: bool

    def find(self, id_: Any) -> RpcRequest | None:
        """The request a response with this id answers (ids compare by type too: 1 is not "1")."""
        for request in self.requests:
            if not request.notification and type(request.id) is type(id_) and request.id == id_:
                return request
        return None

    @property
    def single(self) -> RpcRequest | None:
        return self.requests[0] if not self.batch and self.requests else None


def _valid_id(value: Any) -> bool:
    return value is None or (isinstance(value, str | int | float) and not isinstance(value, bool))


def _request(item: Any) -> RpcRequest | None:
    if not isinstance(item, dict) or item.get("jsonrpc") != "2.0":
        return None
    method = item.get("method")
    if not isinstance(method, str):
        return None
    if "id" not in item:
        return RpcRequest(NO_ID, method, item.get("params"))
    id_ = item["id"]
    return RpcRequest(id_ if _valid_id(id_) else None, method, item.get("params"))


def parse_call(document: Any) -> RpcCall | None:
    """A JSON-RPC request body, or ``None`` when it is not one."""
    if isinstance(document, list):
        requests = [r for item in document if (r := _request(item)) is not None]
        return RpcCall(tuple(requests), batch=True) if requests else None
    request = _request(document)
    return RpcCall((request,), batch=False) if request is not None else None


def _is_response(item: Any) -> bool:
    return (
        isinstance(item, dict)
        and item.get("jsonrpc") == "2.0"
        and ("result" in item or isinstance(item.get("error"), dict))
    )


def response_elements(document: Any) -> tuple[list[Any], bool] | None:
    """The response objects of a JSON-RPC response body and whether it is a batch; ``None``
    when the body is not JSON-RPC responses."""
    if isinstance(document, list):
        if document and all(_is_response(item) for item in document):
            return list(document), True
        return None
    return ([document], False) if _is_response(document) else None


def rpc_code(envelope: Envelope, upstream_error: Any = None) -> int:
    """The upstream's own code when it sent an integer one, else one for the envelope's category."""
    if isinstance(upstream_error, dict):
        code = upstream_error.get("code")
        if isinstance(code, int) and not isinstance(code, bool):
            return code
    return CODES.get(envelope.category, SERVER_ERROR)


def error_object(
    id_: Any, envelope: Envelope, upstream_error: Any = None, data: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A JSON-RPC error response carrying ``envelope`` (``data``: its dump, if made already)."""
    message = envelope.message.strip()
    if message and not message.endswith((".", "!", "?")):
        message += "."
    message = f"{message} {envelope.hint}".strip()
    return {
        "jsonrpc": "2.0",
        "id": id_,
        "error": {
            "code": rpc_code(envelope, upstream_error),
            "message": message,
            "data": envelope.as_dict() if data is None else data,
        },
    }


class JsonRpc(Protocol):
    """JSON-RPC 2.0 over HTTP (and its responses in an event stream, as MCP sends them)."""

    name: ClassVar[ProtocolName] = ProtocolName.JSONRPC
    markers: ClassVar[tuple[bytes, ...]] = (b'"jsonrpc"',)
    #: what a call of notifications only is answered with (JSON-RPC over HTTP: 204)
    notification_status: ClassVar[int] = 204

    def claims(self, call: Call) -> bool:
        return call.holds(b'"jsonrpc"') and self.request(call) is not None

    def claims_response(self, content_type: str, document: Any) -> bool:
        found = response_elements(document)
        return found is not None and any("error" in item for item in found[0])

    def request(self, call: Call) -> RpcCall | None:
        """The call's JSON-RPC request body, parsed once."""
        key = "jsonrpc"
        if key not in call.readings:
            call.readings[key] = parse_call(call.document())
        found: RpcCall | None = call.readings[key]
        return found

    def describe(self, call: Call) -> dict[str, str | None]:
        rpc = self.request(call)
        single = rpc.single if rpc is not None else None
        if single is None:
            return {}
        return {"rpc_method": single.method, "tool": single.tool}

    def inspects(self, call: Call, content_type: str) -> Inspection:
        if content_type == SSE:
            return Inspection.EVENTS
        return Inspection.DOCUMENT if is_json_type(content_type) else Inspection.NONE

    def may_hold_errors(self, raw: bytes) -> bool:
        return b'"error"' in raw

    def units(self, call: Call, exchange: Exchange) -> list[Unit] | None:
        found = response_elements(exchange.json)
        if found is None:
            return None
        rpc = self.request(call)
        units = []
        for slot, item in enumerate(found[0]):
            # a transport error's stand-in id ("server-error", null) answers the one request
            request = rpc.find(answered_id(rpc, item.get("id"))) if rpc is not None else None
            unit = self._unit(exchange, slot, item, request)
            if unit is not None:
                units.append(unit)
        return units

    def _unit(
        self, exchange: Exchange, slot: int, item: dict[str, Any], request: RpcRequest | None
    ) -> Unit | None:
        if not isinstance(item.get("error"), dict):
            return None
        narrowed = self._narrowed(exchange, item, self._error_text(item, request), request)
        return Unit(narrowed, slot, request_key(request), source=protocol_data(item["error"]))

    def _error_text(self, item: dict[str, Any], request: RpcRequest | None) -> str:
        """The text body regexes read of an error response: the whole object, as JSON."""
        return dumps(item).decode("utf-8", "replace")

    def scrubbed(self, unit: Unit, scrub: Callable[[str], str]) -> Unit:
        """What programs read of the upstream's own error is kept, every string redacted as
        the envelope is: the ``data`` of a code the MCP specification defines (the versions a
        server supports, with -32022), an MCP tool result's ``structuredContent``. One holding
        more than ``MAX_KEPT_STRINGS`` strings is dropped (the envelope still says what
        failed)."""
        if unit.source is None:
            return unit
        budget = [MAX_KEPT_STRINGS]

        def counted(text: str) -> str:
            budget[0] -= 1
            return scrub(text) if budget[0] >= 0 else ""

        kept = scrubbed_json(unit.source, counted)
        return replace(unit, kept=kept if budget[0] >= 0 else None)

    def _narrowed(
        self, exchange: Exchange, document: Any, text: str, request: RpcRequest | None
    ) -> Exchange:
        return narrowed(
            exchange,
            document,
            text,
            protocol=self.name.value,
            rpc_method=request.method if request is not None else None,
            tool=request.tool if request is not None else None,
            arguments=request.arguments if request is not None else None,
        )

    def answer_status(self, status: int | None) -> int:
        """The HTTP status of an answer carrying JSON-RPC errors: a 4xx is the transport's own
        (version negotiation, discovery, a session it does not know) and stays; anything else
        is 200, the error in the body, since MCP's 1.x clients read no 5xx body."""
        return status if status is not None and 400 <= status < 500 else 200

    def notification_answer(self, status: int) -> int:
        """The status of the empty answer to a call of notifications only that failed: JSON-RPC
        over HTTP says 204, whatever happened (there is nothing to parse)."""
        return self.notification_status

    def render(
        self, call: Call, exchange: Exchange, outcomes: Sequence[tuple[Unit, Envelope]]
    ) -> Rendered:
        found = response_elements(exchange.json)
        assert found is not None  # units came from this document
        rpc = self.request(call)
        if rpc is not None and not any(not r.notification for r in rpc.requests):
            return Rendered(b"", None, self.notification_answer(exchange.status or 200))
        items, batch = found
        out = list(items)
        dumped: dict[int, dict[str, Any]] = {}  # envelopes shared past MAX_UNITS: dumped once
        for unit, envelope in outcomes:
            data = dumped.get(id(envelope))
            if data is None:
                data = dumped[id(envelope)] = envelope.as_dict()
            item = items[unit.slot]
            id_ = answered_id(rpc, item.get("id"))
            out[unit.slot] = self._rendered(call, unit, item, envelope, data, id_)
        return Rendered(dumps(out if batch else out[0]), JSON, self.answer_status(exchange.status))

    def _rendered(
        self,
        call: Call,
        unit: Unit,
        item: dict[str, Any],
        envelope: Envelope,
        data: dict[str, Any],
        id_: Any,
    ) -> dict[str, Any]:
        if isinstance(unit.kept, dict):  # the protocol's own data members, beside the envelope
            data = {**unit.kept, **data}
        return error_object(id_, envelope, item.get("error"), data)

    def render_whole(self, call: Call, envelope: Envelope, status: int) -> Rendered | None:
        rpc = self.request(call)
        if rpc is None and call.tee is None:
            return None  # no body, no JSON-RPC request (MCP's GET stream, DELETE): plain HTTP
        if rpc is None:  # the id is unknown (the body was cut or is not JSON-RPC): null
            return Rendered(dumps(error_object(None, envelope)), JSON, self.answer_status(status))
        answered = [r for r in rpc.requests if not r.notification]
        if not answered:
            return Rendered(b"", None, self.notification_answer(status))
        data = envelope.as_dict()  # one dump for a batch of any size
        items = [self._whole_item(call, r, envelope, data, status) for r in answered]
        body = dumps(items if rpc.batch else items[0])
        return Rendered(body, JSON, self.answer_status(status))

    def _whole_item(
        self, call: Call, request: RpcRequest, envelope: Envelope, data: dict[str, Any], status: int
    ) -> dict[str, Any]:
        """The answer to one request of a call whose whole answer was an error."""
        return error_object(request.id, envelope, data=data)


#: Codes the MCP specification defines (2026-07-28: -32020 to -32099, allocated from -32020),
#: whose ``data`` clients read (``supported`` versions with -32022): kept beside the envelope.
SPEC_CODES = range(-32099, -32019)
#: Strings of an upstream's kept member redacted at most; a larger member is dropped.
MAX_KEPT_STRINGS = 256


def protocol_data(error: dict[str, Any]) -> dict[str, Any] | None:
    """The ``data`` of an error whose code the MCP specification defines, when an object."""
    code, data = error.get("code"), error.get("data")
    if isinstance(code, int) and code in SPEC_CODES and isinstance(data, dict):
        return data
    return None


def scrubbed_json(value: Any, scrub: Callable[[str], str]) -> Any:
    """``value`` (parsed JSON, depth-capped by ``json_depth``) with every string through ``scrub``;
    keys are kept (names a program reads), values that were only internals become empty."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {key: scrubbed_json(item, scrub) for key, item in value.items()}
    if isinstance(value, list):
        return [scrubbed_json(item, scrub) for item in value]
    return value


def request_key(request: RpcRequest | None) -> str:
    """A batch element's identity for the cross-call view: its method and params (its id is
    numbered anew when the call is resent)."""
    if request is None:
        return ""
    return request.method + "\x00" + dumps([request.params]).decode("utf-8", "replace")


def answered_id(rpc: RpcCall | None, id_: Any) -> Any:
    """The id an answer carries: the upstream's when it is one the call sent; else, when the
    call holds one request with an id, that one (a transport error's stand-in, ``null`` or
    ``"server-error"``, answers it); else ``null`` (JSON-RPC: the id could not be told)."""
    if rpc is None:
        return id_
    if rpc.find(id_) is not None:
        return id_
    sent = [r for r in rpc.requests if not r.notification]
    return sent[0].id if len(sent) == 1 else None
