"""The agent's request as the document's enrichment reads it: method, path, query, bodies."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.policy.exchange import NOT_JSON


@dataclass(frozen=True, slots=True)
class Request:
    """What the enricher reads of the agent's request."""

    method: str
    path: str  # raw (percent-encoded), without the query
    query: Any  # a MultiDict of the decoded query
    headers: Mapping[str, str]
    response_json: Any = None  # the upstream's error document, for a link's $response.body
    request_json: Any = NOT_JSON  # the agent's JSON body, when mend kept it (``Call.tee``)
