"""The protocol interface, and what one request carries of its protocol (``Call``).

A protocol plugs into the proxy at four points, and nowhere else:

- detection: ``signalled`` (request headers and query, free), ``claims`` (the parsed request
  body), ``claims_response`` (a response that only this protocol sends);
- inspection: ``inspects`` says which successes must be read (an error in a 200) and
  ``may_hold_errors`` spares the parse of one that cannot hold any;
- ``units``: the errors in a response, each as its own ``Exchange`` for the rules;
- rendering: ``render`` puts each unit's envelope back in place, ``render_whole`` answers an error
  that is not in the protocol's shape (an HTML 502, mend's own failures) in the protocol's shape.

The request body is never held for detection: ``Call.feed`` keeps a copy of at most ``cap`` bytes
of a JSON body as it streams upstream, and it is parsed only when a response needs it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar

from proxy.config.choices import ProtocolName
from proxy.policy import json_depth
from proxy.policy.envelope.model import Envelope
from proxy.policy.exchange import NOT_JSON, Exchange

if TYPE_CHECKING:  # annotations only: the policy imports no aiohttp
    from aiohttp import web


class Inspection(Enum):
    """What a protocol wants of a successful response."""

    NONE = "none"  # stream it through untouched
    DOCUMENT = "document"  # read it (capped) and look for errors in it
    EVENTS = "events"  # rewrite it event by event as it arrives (text/event-stream)


#: Bytes of a JSON request body kept for detection; a longer body is not parsed (see ``Call``).
TEE_BYTES = 64 << 10

_JSON_TYPES = ("application/json", "application/graphql", "text/json")


def is_json_type(content_type: str) -> bool:
    """``application/json``, ``application/*+json`` and friends (lowercase media type)."""
    return content_type.startswith(_JSON_TYPES) or content_type.endswith("+json")


_UNPARSED: Any = object()


class Call:
    """One request as the protocols see it: its cheap signals, and its body kept on the side.

    ``tee`` holds the first ``cap`` bytes of a JSON body as they stream upstream (``feed``);
    ``document`` parses it once, on demand, through ``json_depth.loads``. ``protocol`` is the
    protocol in force once decided (the route's, a signal's, or the body's); ``decided`` says
    that no other will be looked for. A plain class with slots, not a dataclass: one is made for
    every JSON request of an ``auto`` route, and its construction is on that request's path.
    """

    __slots__ = (
        "_document",
        "accept",
        "cap",
        "decided",
        "ended",
        "hint",
        "keep_rpc_errors",
        "mcp_version",
        "method",
        "protocol",
        "query_string",
        "readings",
        "seen",
        "tee",
    )

    def __init__(
        self,
        method: str,
        query_string: str = "",
        accept: str = "",
        *,
        protocol: Protocol | None = None,
        tee: bytearray | None = None,
        cap: int = TEE_BYTES,
        hint: Protocol | None = None,
    ) -> None:
        self.method = method
        #: the request's ``MCP-Protocol-Version`` (empty when it sent none; ``Detector.call``)
        self.mcp_version = ""
        #: the protocol the request's headers name: it claims a body of its family (any
        #: JSON-RPC body for MCP), but a header alone decides nothing (docs/contract.md §6)
        self.hint = hint
        self.query_string = query_string
        self.accept = accept
        self.protocol = protocol
        self.decided = protocol is not None
        self.tee = tee
        self.cap = cap
        self.seen = 0
        self.ended = False
        self._document = _UNPARSED
        #: protocol-specific readings of the request (``JsonRpc.request``), by protocol name
        self.readings: dict[str, Any] = {}
        #: an MCP route's ``tool_errors: error``: a JSON-RPC error answering ``tools/call``
        #: stays one (by default it reaches the model as an ``isError`` result)
        self.keep_rpc_errors = False

    def feed(self, chunk: bytes) -> None:
        """Keep a copy of what fits of ``chunk``; called as the body streams upstream."""
        self.seen += len(chunk)
        tee = self.tee
        if tee is not None and len(tee) < self.cap:
            tee += chunk[: self.cap - len(tee)]

    def end(self) -> None:
        self.ended = True

    @property
    def complete(self) -> bool:
        """Whether the whole body is in ``tee`` (it ended and fit)."""
        return self.ended and self.seen <= self.cap

    def holds(self, marker: bytes) -> bool:
        """Whether the kept body contains ``marker`` (a C-speed scan, no parse)."""
        return self.tee is not None and marker in self.tee

    def document(self) -> Any:
        """The JSON request body, parsed once; ``NOT_JSON`` when absent, cut or not JSON."""
        if self._document is _UNPARSED:
            if self.tee is not None and not self.ended:
                return NOT_JSON  # still arriving: asked again later, it may parse
            if self.tee and self.complete:
                self._document = json_depth.loads(bytes(self.tee))
            else:
                self._document = NOT_JSON
        return self._document


@dataclass(frozen=True, slots=True)
class Unit:
    """One error a protocol found in a response: the exchange rules see, and where it goes back.

    ``slot`` is the error's place in the response (a batch element, an ``errors[]`` entry).
    """

    exchange: Exchange
    slot: int
    #: what the error answers within the call, for the cross-call view when one response holds
    #: several errors: the batch element's method and params, a GraphQL error's path
    key: str = ""
    #: what the protocol may keep of the upstream's own unit beside the envelope, as it came:
    #: never rendered (an MCP tool result's ``structuredContent``)
    source: Any = None
    #: ``source`` redacted as the envelope is (``Protocol.scrubbed``): what ``render`` keeps
    kept: Any = None
    #: the HTTP answer of an API behind the unit, as the unit's words report it (an MCP tool
    #: wrapping a REST call: ``protocols/wrapped.py``), for the rules to read before the words
    reported: Exchange | None = None
    #: the words quote that answer (its body or headers), not only its status: then what a rule
    #: makes of the answer's status alone is worth more than what one makes of the words
    quotes: bool = False


@dataclass(frozen=True, slots=True)
class Rendered:
    """A protocol's answer: body, Content-Type (``None``: no body) and HTTP status."""

    body: bytes
    content_type: str | None
    status: int


def narrowed(exchange: Exchange, document: Any, text: str, **request: Any) -> Exchange:
    """``exchange`` reduced to one error: rules see ``document`` (and ``text``), nothing else."""
    return replace(exchange, json=document, text=text, truncated=False, queried={}, **request)


class Protocol(ABC):
    """One protocol's behaviour; instances are stateless and shared by every request."""

    name: ClassVar[ProtocolName]
    #: bytes one of which a request body of this protocol must hold: a body with none of any
    #: protocol's markers is decided against without a call to ``claims`` (or a parse)
    markers: ClassVar[tuple[bytes, ...]] = ()
    #: whether ``signalled`` can say anything (``Detector.call`` asks only those that can)
    signals: ClassVar[bool] = False

    def signalled(self, request: web.BaseRequest) -> bool:
        """Whether the request's headers or query say it is this protocol: enough for a request
        without a body; one with a body is this protocol only if its body is (``claims``, with
        the signal in ``Call.hint``).

        Runs on every request of an ``auto`` route: header look-ups only, nothing parsed."""
        return False

    @abstractmethod
    def claims(self, call: Call) -> bool:
        """Whether the request body is this protocol's (parsing it through ``call.document``)."""

    def claims_response(self, content_type: str, document: Any) -> bool:
        """Whether a response only this protocol sends answered a request nothing detected."""
        return False

    @abstractmethod
    def inspects(self, call: Call, content_type: str) -> Inspection:
        """What to do with a successful response of this media type to ``call``."""

    def may_hold_errors(self, raw: bytes) -> bool:
        """A cheap scan of a success body: ``False`` means it certainly holds no error."""
        return True

    @abstractmethod
    def units(self, call: Call, exchange: Exchange) -> list[Unit] | None:
        """The errors in a response, in order; ``None`` when it is not in this protocol's shape."""

    def describe(self, call: Call) -> dict[str, str | None]:
        """What an error answering the whole call is about, for the rules: ``rpc_method`` and
        ``tool`` (``Exchange`` fields) when the call makes one JSON-RPC request."""
        return {}

    def scrubbed(self, unit: Unit, scrub: Callable[[str], str]) -> Unit:
        """The unit with what ``render`` keeps of the upstream's own error passed through
        ``scrub`` (the envelope's redaction); most protocols keep nothing."""
        return unit

    def adjust(self, unit: Unit, envelope: Envelope) -> Envelope:
        """What the protocol itself knows about a unit's envelope (GraphQL: partial success)."""
        return envelope

    @abstractmethod
    def render(
        self, call: Call, exchange: Exchange, outcomes: Sequence[tuple[Unit, Envelope]]
    ) -> Rendered:
        """The response with each unit's error replaced by its envelope, in the protocol's shape."""

    @abstractmethod
    def render_whole(self, call: Call, envelope: Envelope, status: int) -> Rendered | None:
        """One envelope for the whole request (an error not in the protocol's shape); ``None``
        when the request holds nothing to answer in the protocol (an MCP GET, a DELETE)."""


async def replayed(
    head: list[bytes], rest: AsyncIterator[bytes], complete: bool
) -> AsyncIterator[bytes]:
    """A body whose first chunks (``head``) were read to look at it, sent on as it came: those
    chunks, then the rest as it arrives (nothing more when ``complete``)."""
    for chunk in head:
        yield chunk
    if not complete:
        async for chunk in rest:
            yield chunk
