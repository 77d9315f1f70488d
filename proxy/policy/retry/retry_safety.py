"""What makes a request safe to send again beyond its method: a route's ``retry_safe:``
overrides, and the annotations an MCP server gave its tools in ``tools/list``.

``proxy/policy/retry/resend.py`` asks this only for a request that may already have taken effect
(mend sent it and got no usable answer). An MCP ``tools/call`` is always a POST: what the tool is,
the server said in its ``tools/list`` answer (``readOnlyHint``, ``idempotentHint``,
``destructiveHint``; MCP 2025-03-26 and later), which mend reads as it passes (JSON or an event
stream) and remembers per route in one capped table. A tool read-only or idempotent is safe to call
again; ``destructiveHint`` does not change that (deleting twice deletes once) but tells the plan to
ask the user first. Annotations are hints from the server, as MCP says: a route's ``retry_safe:``
entry overrides them, and the method, for the requests it names.

Some POSTs only read, whatever their method says: every MCP request but ``tools/call``
(``tools/list``, ``resources/read``, ``prompts/get``, ``ping``...: listing, reading or setting
a state twice has the effect of once), and a GraphQL request whose document holds no
``mutation`` (a query; a persisted query, with no document, is not known to be one).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from proxy.config.route import RetrySafe, Route
from proxy.policy.exchange import Exchange
from proxy.policy.regex import Linear
from proxy.policy.rules.matchers import path_glob

#: Tools remembered, all routes together; the least recently listed go first.
MAX_TOOLS = 4096
#: Tools read from one ``tools/list`` answer (a page: servers paginate long lists).
MAX_LISTED = 1000
#: Elements of a batch answer looked at for a ``tools/list`` result.
MAX_BATCH = 100
#: MCP tool names are 1 to 128 characters (2025-11-25); longer ones are not remembered.
MAX_NAME = 128
#: Compiled override lists kept (one per distinct ``retry_safe:`` list; reloads add more).
MAX_OVERRIDES = 64
#: A request body that may be a ``tools/list`` call (a byte scan of the kept copy, no parse).
LISTING_MARKER = b'"tools/list"'


@dataclass(frozen=True, slots=True)
class ToolHints:
    """A tool's annotations as its server stated them; ``None``: not stated."""

    read_only: bool | None = None
    idempotent: bool | None = None
    destructive: bool | None = None

    @property
    def safe(self) -> bool | None:
        """True when calling the tool again has the effect of one call; else ``None`` (the
        method, POST, decides: not safe without an ``Idempotency-Key``)."""
        return True if self.read_only or self.idempotent else None

    @property
    def asks_user(self) -> bool:
        """Whether the plan asks the user first: MCP's default for a tool that is not
        read-only is destructive."""
        return not self.read_only and self.destructive is not False


@dataclass(frozen=True, slots=True)
class Verdict:
    """What decides a retry besides the method: ``safe`` for ``Exchange.retry_safe``."""

    safe: bool | None = None
    destructive: bool = False


_NO_VERDICT = Verdict()
_READS = Verdict(safe=True)
_Compiled = tuple[tuple[str | None, Linear, bool], ...]  # (method or None for a tool, glob, safe)


def _flag(annotations: dict[str, Any], name: str) -> bool | None:
    value = annotations.get(name)
    return value if isinstance(value, bool) else None


def _hints(tool: Any) -> tuple[str, ToolHints] | None:
    """A ``tools/list`` entry's name and annotations; ``None`` for an entry that is not one."""
    if not isinstance(tool, dict):
        return None
    name = tool.get("name")
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
        return None
    annotations = tool.get("annotations")
    if not isinstance(annotations, dict):
        return name, ToolHints()
    return name, ToolHints(
        _flag(annotations, "readOnlyHint"),
        _flag(annotations, "idempotentHint"),
        _flag(annotations, "destructiveHint"),
    )


def _listed_tools(document: Any) -> Iterator[Any]:
    """The ``tools`` of every JSON-RPC result in a response (one object or a batch)."""
    for item in document[:MAX_BATCH] if isinstance(document, list) else [document]:
        result = item.get("result") if isinstance(item, dict) else None
        tools = result.get("tools") if isinstance(result, dict) else None
        if isinstance(tools, list):
            yield from tools[:MAX_LISTED]


class RetrySafety:
    """The per-route tool table and the compiled ``retry_safe:`` overrides; one per proxy."""

    def __init__(self, max_tools: int = MAX_TOOLS) -> None:
        self.max_tools = max_tools
        self._tools: OrderedDict[tuple[str, str], ToolHints] = OrderedDict()
        self._overrides: dict[tuple[RetrySafe, ...], _Compiled] = {}

    def __len__(self) -> int:
        return len(self._tools)

    def learn(self, route: str, document: Any) -> None:
        """Remember the annotations of every tool a ``tools/list`` answer lists."""
        for tool in _listed_tools(document):
            found = _hints(tool)
            if found is None:
                continue
            key = (route, found[0])
            self._tools[key] = found[1]
            self._tools.move_to_end(key)
            if len(self._tools) > self.max_tools:
                self._tools.popitem(last=False)

    def hints(self, route: str, tool: str) -> ToolHints | None:
        return self._tools.get((route, tool))

    def verdict(self, route: Route | None, exchange: Exchange, sent: Any = None) -> Verdict:
        """What the route's overrides, else the tool's annotations, else the protocol say of
        this request; ``sent`` is its JSON body when mend kept it (``Call.document``)."""
        if route is not None and route.retry_safe:
            for method, glob, safe in self._compiled(route.retry_safe):
                if method is None:
                    hit = exchange.tool is not None and glob.fullmatch(exchange.tool) is not None
                else:
                    hit = method == exchange.method and glob.fullmatch(exchange.path) is not None
                if hit:
                    return Verdict(safe)
        if exchange.tool is None and isinstance(sent, list):
            return _READS if self._batch_safe(exchange, sent) else _NO_VERDICT
        if exchange.tool is None:
            return _READS if _only_reads(exchange, sent) else _NO_VERDICT
        hints = self.hints(exchange.route, exchange.tool)
        if hints is None:
            return _NO_VERDICT
        return Verdict(hints.safe, hints.asks_user)

    def _batch_safe(self, exchange: Exchange, sent: list[Any]) -> bool:
        """An MCP batch (revisions before 2025-06-18) is safe to send again only when every
        call in it is: none a ``tools/call`` but of a tool annotated read-only or idempotent."""
        if exchange.protocol != "mcp" or not 0 < len(sent) <= MAX_BATCH:
            return False
        for item in sent:
            method = item.get("method") if isinstance(item, dict) else None
            if not isinstance(method, str):
                return False
            if method != "tools/call":
                continue
            params = item.get("params")
            name = params.get("name") if isinstance(params, dict) else None
            hints = self.hints(exchange.route, name) if isinstance(name, str) else None
            if hints is None or hints.safe is not True:
                return False
        return True

    def _compiled(self, entries: tuple[RetrySafe, ...]) -> _Compiled:
        compiled = self._overrides.get(entries)
        if compiled is None:
            if len(self._overrides) >= MAX_OVERRIDES:
                self._overrides.clear()
            compiled = self._overrides[entries] = tuple(_compile(entry) for entry in entries)
        return compiled


def _only_reads(exchange: Exchange, sent: Any) -> bool:
    """An MCP request other than a tool call, or a GraphQL request without a mutation."""
    if exchange.protocol == "mcp":
        return exchange.rpc_method is not None and exchange.rpc_method != "tools/call"
    if exchange.protocol == "graphql" and isinstance(sent, dict):
        document = sent.get("query")
        return isinstance(document, str) and "mutation" not in document
    return False


def _compile(entry: RetrySafe) -> tuple[str | None, Linear, bool]:
    if entry.tool is not None:
        return None, path_glob(entry.tool), entry.safe
    assert entry.operation is not None  # RetrySafe checks that one of the two is set
    method, _, path = entry.operation.partition(" ")
    return method, path_glob(path), entry.safe
