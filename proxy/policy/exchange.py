"""What rules look at: one request and the upstream's (error) response, read once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import orjson

from proxy.policy.envelope.model import Applied

if TYPE_CHECKING:
    from proxy.policy.rules.query import Query


class _NotJson:
    """Sentinel: the body did not parse as JSON (``None`` is valid JSON)."""

    def __repr__(self) -> str:
        return "NOT_JSON"


NOT_JSON: Final = _NotJson()
#: Sentinel: a question not yet asked of this exchange (``None`` is an answer).
_UNASKED: Final = object()


@dataclass(slots=True)
class Exchange:
    method: str
    path: str
    route: str
    request_id: str
    request_headers: Mapping[str, str]
    status: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    content_type: str = ""
    text: str = ""
    json: Any = NOT_JSON
    truncated: bool = False
    #: the protocol the agent speaks (``http``, ``jsonrpc``, ``mcp``, ``graphql``;
    #: proxy/policy/protocols)
    protocol: str = "http"
    #: the JSON-RPC method of the request this error answers, and the MCP tool it called
    rpc_method: str | None = None
    tool: str | None = None
    #: mend's own failure: whether the request may have taken effect upstream (docs/contract.md §1
    #: ``applied``; ``None``: the upstream answered), and whether sending it again is safe when
    #: something other than its method says (``proxy/policy/retry/retry_safety.py``: a route
    #: override, an MCP tool's annotations; ``None``: the method decides)
    applied: Applied | None = None
    retry_safe: bool | None = None
    #: an MCP tool its server did not mark non-destructive: a plan to check first asks the user
    destructive: bool = False
    #: the arguments of the MCP ``tools/call`` this error answers, as the model sent them
    arguments: Any = None
    #: JMESPath results by expression: many rules ask the same questions of one body.
    queried: dict[str, Any] = field(default_factory=dict)
    #: response headers read as JSON (``header_json.document``), by name
    header_documents: dict[str, tuple[Any, bytes | None]] = field(
        default_factory=dict, repr=False, compare=False
    )
    #: ``written``'s answer, and the document it was written from
    _written: tuple[Any, bytes | None] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def is_json(self) -> bool:
        return self.json is not NOT_JSON

    def written(self) -> bytes | None:
        """The JSON document as ``orjson`` writes it (equal documents, equal bytes: a key for
        what was made of one before), once per document; ``None``: not JSON, or a document
        ``orjson`` cannot write (an integer past 64 bits)."""
        document = self.json
        known = self._written
        if known is not None and known[0] is document:
            return known[1]
        written: bytes | None = None
        if document is not NOT_JSON:
            try:
                written = orjson.dumps(document)
            except (orjson.JSONEncodeError, TypeError):
                written = None
        self._written = (document, written)
        return written

    def query(self, expression: str, compiled: Query) -> Any:
        """``compiled.search(self.json)``, computed once per expression per exchange."""
        value = self.queried.get(expression, _UNASKED)
        if value is _UNASKED:  # a look-up, not a KeyError: most questions are new to a body
            value = self.queried[expression] = compiled.search(self.json)
        return value
