"""The named values a route chooses among: its ``rendering:`` and its ``protocol:``."""

from __future__ import annotations

from enum import StrEnum


class Rendering(StrEnum):
    """Values as operators write them in a route's ``rendering:``."""

    JSON = "json"
    PROBLEM = "problem"
    TEXT = "text"
    MARKDOWN = "markdown"
    XML = "xml"


class ProtocolName(StrEnum):
    """A route's ``protocol:`` (and the ``protocol`` label of ``mend_errors_total``)."""

    AUTO = "auto"
    HTTP = "http"
    JSONRPC = "jsonrpc"
    MCP = "mcp"
    GRAPHQL = "graphql"
