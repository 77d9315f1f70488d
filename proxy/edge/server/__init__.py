"""mend's own HTTP/1.1 server for the agent port: llhttp through ``httptools``, on asyncio.

``AgentServer`` is the protocol factory (connections, caps, drain), ``AgentConnection`` one
agent's connection, ``Listener`` the bound sockets. Requests reach the proxy as aiohttp's
``BaseRequest`` and responses leave through aiohttp's response classes and ``StreamWriter``: the
layers above the edge do not change with the parser under them.
"""

from proxy.edge.server.connection import AgentConnection
from proxy.edge.server.limits import Limits
from proxy.edge.server.listener import AgentServer, Listener, Refuser
from proxy.edge.server.owner import Handler

__all__ = ["AgentConnection", "AgentServer", "Handler", "Limits", "Listener", "Refuser"]
