"""What rules look at: one request and the upstream's (error) response, read once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from proxy.policy.envelope import Applied

if TYPE_CHECKING:
    from proxy.policy.query import Query


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
    #: mend's own failure: whether the request may have taken effect upstream (CONTRACT §1
    #: ``applied``; ``None``: the upstream answered), and whether sending it again is safe when
    #: something other than its method says (``proxy/policy/retry_safety.py``: a route override, an
    #: MCP tool's annotations; ``None``: the method decides)
    applied: Applied | None = None
    retry_safe: bool | None = None
    #: an MCP tool its server did not mark non-destructive: a plan to check first asks the user
    destructive: bool = False
    #: the arguments of the MCP ``tools/call`` this error answers, as the model sent them
    arguments: Any = None
    #: JMESPath results by expression: many rules ask the same questions of one body.
    queried: dict[str, Any] = field(default_factory=dict)

    @property
    def is_json(self) -> bool:
        return self.json is not NOT_JSON

    def query(self, expression: str, compiled: Query) -> Any:
        """``compiled.search(self.json)``, computed once per expression per exchange."""
        value = self.queried.get(expression, _UNASKED)
        if value is _UNASKED:  # a look-up, not a KeyError: most questions are new to a body
            value = self.queried[expression] = compiled.search(self.json)
        return value
