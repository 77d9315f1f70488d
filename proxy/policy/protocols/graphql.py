"""GraphQL over HTTP: the answer stays a GraphQL response (docs/contract.md §6).

Units are the ``errors[]`` entries, each matched on its own; the rules see the response reduced to
that one error (``{"errors": [entry], "data": ...}``), so a rule reads ``errors[0]``. The answer
keeps ``data`` exactly as the upstream sent it; each entry keeps its ``path`` and ``locations``,
takes the envelope's message, and its ``extensions`` become ``{"code", "mend": <envelope>}``: the
upstream's ``stacktrace``, ``exception`` and other internals are gone, as is the response's own
``extensions``. Partial success (``data`` with a non-null field beside ``errors``) is
``severity: warning``; the data stays.

Detected by a JSON body whose ``query`` is a GraphQL document (or an Apollo persisted query), a
GET whose ``?query=`` is one, or an ``application/graphql-response+json`` response. A ``query``
that is not a document (``{"query": "red shoes"}`` to a search API) is not GraphQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import parse_qs

from proxy.config.choices import ProtocolName
from proxy.policy import json_depth
from proxy.policy.envelope.model import Envelope, Severity
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
from proxy.policy.render.jsontext import json_bytes

if TYPE_CHECKING:  # annotations only: the policy imports no aiohttp
    from aiohttp import web

RESPONSE_TYPE = "application/graphql-response+json"
JSON = "application/json"
_KEYWORDS = ("query", "mutation", "subscription", "fragment")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def is_document(text: str) -> bool:
    """Whether ``text`` starts like a GraphQL document: ``{``, a comment, or an operation or
    fragment keyword standing alone."""
    head = text.lstrip(" \t\r\n\ufeff,")[:20]
    if head[:1] in ("{", "#"):
        return True
    for keyword in _KEYWORDS:
        if head.startswith(keyword):
            rest = head[len(keyword) :]
            return not rest or rest[0] not in _NAME_CHARS
    return False


@dataclass(frozen=True, slots=True)
class GraphQLRequest:
    query: str | None
    operation_name: str | None
    variables: Any


def _from_body(document: Any) -> GraphQLRequest | None:
    if not isinstance(document, dict):
        return None
    query = document.get("query")
    persisted = isinstance(document.get("extensions"), dict) and isinstance(
        document["extensions"].get("persistedQuery"), dict
    )
    if not ((isinstance(query, str) and is_document(query)) or (query is None and persisted)):
        return None
    name = document.get("operationName")
    return GraphQLRequest(
        query if isinstance(query, str) else None,
        name if isinstance(name, str) else None,
        document.get("variables"),
    )


def _from_query(query_string: str) -> GraphQLRequest | None:
    params = parse_qs(query_string, max_num_fields=64)

    def first(name: str) -> str | None:
        values = params.get(name)
        return values[0] if values else None

    query = first("query")
    if query is None or not is_document(query):
        return None
    variables = first("variables")
    return GraphQLRequest(
        query,
        first("operationName"),
        json_depth.loads(variables) if variables is not None else None,
    )


def _locations(value: Any) -> list[dict[str, int]] | None:
    """``locations`` as the spec shapes them; anything else an upstream put there is dropped."""
    if not isinstance(value, list):
        return None
    out = []
    for item in value[:20]:
        if isinstance(item, dict):
            line, column = item.get("line"), item.get("column")
            if type(line) is int and type(column) is int:
                out.append({"line": line, "column": column})
    return out


def _path(value: Any) -> list[str | int] | None:
    """A response path: field names and list indexes only."""
    if not isinstance(value, list):
        return None
    return [
        item[:256] if isinstance(item, str) else item
        for item in value[:64]
        if isinstance(item, str) or type(item) is int
    ]


def is_partial(document: Any) -> bool:
    """``data`` holds at least one non-null field: the request partly succeeded."""
    data = document.get("data") if isinstance(document, dict) else None
    return isinstance(data, dict) and any(value is not None for value in data.values())


def error_entry(
    entry: Any, envelope: Envelope | None, data: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One ``errors[]`` entry in the answer: the upstream's ``locations`` and ``path``, the
    envelope's message and code, the envelope itself under ``extensions.mend``."""
    out: dict[str, Any] = {
        "message": envelope.message if envelope else "The GraphQL server reported an error."
    }
    if isinstance(entry, dict):
        if (locations := _locations(entry.get("locations"))) is not None:
            out["locations"] = locations
        if (path := _path(entry.get("path"))) is not None:
            out["path"] = path
    if envelope is not None:
        dumped = envelope.as_dict() if data is None else data
        out["extensions"] = {"code": envelope.code, "mend": dumped}
    return out


class GraphQL(Protocol):
    name: ClassVar[ProtocolName] = ProtocolName.GRAPHQL
    markers: ClassVar[tuple[bytes, ...]] = (b'"query"', b'"persistedQuery"')
    signals: ClassVar[bool] = True

    def signalled(self, request: web.BaseRequest) -> bool:
        # raw_path is the parser's own string, target and query: no URL object is built
        if request.method != "GET" or "query=" not in request.raw_path:
            return False
        return _from_query(request.query_string) is not None

    def claims(self, call: Call) -> bool:
        if not (call.holds(b'"query"') or call.holds(b'"persistedQuery"')):
            return call.method == "GET" and self.request(call) is not None
        return self.request(call) is not None

    def claims_response(self, content_type: str, document: Any) -> bool:
        return content_type == RESPONSE_TYPE

    def request(self, call: Call) -> GraphQLRequest | None:
        key = "graphql"
        if key not in call.readings:
            found = _from_body(call.document())
            if found is None and call.method == "GET" and "query=" in call.query_string:
                found = _from_query(call.query_string)
            call.readings[key] = found
        reading: GraphQLRequest | None = call.readings[key]
        return reading

    def inspects(self, call: Call, content_type: str) -> Inspection:
        # multipart/mixed (@defer) and event streams (subscriptions) pass through untouched
        return Inspection.DOCUMENT if is_json_type(content_type) else Inspection.NONE

    def may_hold_errors(self, raw: bytes) -> bool:
        return b'"errors"' in raw

    def units(self, call: Call, exchange: Exchange) -> list[Unit] | None:
        document = exchange.json
        if not isinstance(document, dict) or not ("errors" in document or "data" in document):
            return None
        errors = document.get("errors")
        if errors is None:
            return []
        if not isinstance(errors, list):
            return None
        units = []
        for slot, entry in enumerate(errors):
            reduced: dict[str, Any] = {"errors": [entry]}
            if "data" in document:
                reduced["data"] = document["data"]
            text = json_bytes(entry).decode("utf-8", "replace")
            path = entry.get("path") if isinstance(entry, dict) else None
            key = json_bytes(path).decode("utf-8", "replace") if path is not None else f"#{slot}"
            unit = Unit(narrowed(exchange, reduced, text, protocol=self.name.value), slot, key)
            units.append(unit)
        return units

    def adjust(self, unit: Unit, envelope: Envelope) -> Envelope:
        if is_partial(unit.exchange.json) and envelope.severity in (Severity.ERROR, Severity.FATAL):
            return envelope.model_copy(update={"severity": Severity.WARNING})
        return envelope

    def render(
        self, call: Call, exchange: Exchange, outcomes: Sequence[tuple[Unit, Envelope]]
    ) -> Rendered:
        document = exchange.json
        by_slot = {unit.slot: envelope for unit, envelope in outcomes}
        distinct = {id(e): e for e in by_slot.values()}
        dumped = {key: e.as_dict() for key, e in distinct.items()}  # shared ones dumped once
        out: dict[str, Any] = {}
        if "data" in document:
            out["data"] = document["data"]
        out["errors"] = [
            error_entry(entry, env, dumped[id(env)] if env is not None else None)
            for slot, entry in enumerate(document["errors"])
            for env in [by_slot.get(slot)]
        ]
        content_type = exchange.content_type if is_json_type(exchange.content_type) else JSON
        return Rendered(json_bytes(out), content_type, exchange.status or 200)

    def render_whole(self, call: Call, envelope: Envelope, status: int) -> Rendered | None:
        content_type = RESPONSE_TYPE if RESPONSE_TYPE in call.accept.lower() else JSON
        body = {"errors": [error_entry(None, envelope)]}
        return Rendered(json_bytes(body), content_type, status)
