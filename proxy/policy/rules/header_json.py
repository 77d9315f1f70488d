"""A response header's value read as JSON, for the rules that query it (``json: [{header:
...}]``, ``invalid_fields: {header: ...}``): Prism's ``sl-violations`` is a JSON array."""

from __future__ import annotations

from typing import Any, Final

from proxy.policy import json_depth
from proxy.policy.exchange import NOT_JSON, Exchange
from proxy.policy.rules.query import Query

#: The longest header value read as JSON; a longer one is not.
HEADER_JSON_MAX: Final = 16_384
_UNASKED: Final = object()


def document(exchange: Exchange, name: str) -> tuple[Any, bytes | None]:
    """The response header ``name`` (lower case) parsed as JSON, and its bytes (a key for what
    was made of it before), once per exchange; ``NOT_JSON`` when it is absent, longer than
    ``HEADER_JSON_MAX``, not JSON or nested too deep (``json_depth``)."""
    known = exchange.header_documents.get(name)
    if known is None:
        raw = exchange.headers.get(name)
        if raw is None or len(raw) > HEADER_JSON_MAX:
            known = (NOT_JSON, None)
        else:
            data = raw.encode("utf-8", "surrogatepass")
            known = (json_depth.loads(data), data)
        exchange.header_documents[name] = known
    return known


def query(exchange: Exchange, name: str, expression: str, compiled: Query) -> Any:
    """``compiled.search`` of the header ``name``'s JSON (``document``), once per expression per
    exchange; ``NOT_JSON`` when the header holds none."""
    key = f"{name}\0{expression}"  # a header name holds no NUL: never a body's expression
    value = exchange.queried.get(key, _UNASKED)
    if value is _UNASKED:
        found = document(exchange, name)[0]
        value = found if found is NOT_JSON else compiled.search(found)
        exchange.queried[key] = value
    return value
