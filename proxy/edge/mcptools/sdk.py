"""The official MCP SDK's server as mend runs it: imported only by a route's first MCP request
(``mcp_server.py``), so a mend without ``mcp_tools`` never loads the SDK.

One adjustment to the SDK's lowlevel ``Server``: on the handshake revisions its ``initialize``
answer says ``tools.listChanged: true``, since mend tells those sessions when a reload changes the
tools (on 2026-07-28 the SDK says so itself, ``subscriptions/listen`` being served).
"""

from __future__ import annotations

from typing import Any

from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged

__all__ = [
    "InMemorySubscriptionBus",
    "ListenHandler",
    "StreamableHTTPSessionManager",
    "ToolServer",
    "ToolsListChanged",
]


class ToolServer(Server[Any]):
    """The SDK's server, announcing tool-list changes to handshake sessions."""

    __slots__ = ()

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )
