"""A request span's name and attributes from the agent's protocol (MCP, JSON-RPC, GraphQL)."""

from __future__ import annotations

from typing import Any

from proxy.config.choices import ProtocolName
from proxy.policy.protocols.base import Call
from proxy.policy.protocols.graphql import GraphQL
from proxy.policy.protocols.jsonrpc import NO_ID, JsonRpc

#: Characters of an attribute taken from the agent's request (a tool name, an operation name).
ATTRIBUTE_MAX = 256


def clip(value: str) -> str:
    """``value`` cut to ``ATTRIBUTE_MAX`` characters."""
    return value[:ATTRIBUTE_MAX]


def protocol_attributes(
    call: Call | None, session: str | None, version: str | None, attributes: dict[str, Any]
) -> str | None:
    """The span name and attributes the agent's protocol gives (MCP, JSON-RPC, GraphQL)."""
    protocol = call.protocol if call is not None else None
    if call is None or protocol is None:
        return None
    if isinstance(protocol, JsonRpc):
        return _jsonrpc(protocol, call, session, version, attributes)
    if isinstance(protocol, GraphQL):
        found = protocol.request(call)
        if found is None or not found.operation_name:
            return None
        operation = clip(found.operation_name)
        attributes["graphql.operation.name"] = operation
        return operation
    return None


def _jsonrpc(
    protocol: JsonRpc,
    call: Call,
    session: str | None,
    version: str | None,
    attributes: dict[str, Any],
) -> str | None:
    """A JSON-RPC call's span name and attributes; MCP's conventions for an MCP one."""
    rpc = protocol.request(call)
    single = rpc.single if rpc is not None else None
    if single is None:
        return None
    method = clip(single.method)
    if single.id is not NO_ID and single.id is not None:
        attributes["jsonrpc.request.id"] = clip(str(single.id))
    if protocol.name is not ProtocolName.MCP:
        attributes["rpc.system"] = "jsonrpc"
        attributes["rpc.method"] = method
        return method
    attributes["mcp.method.name"] = method
    if session is not None:
        attributes["mcp.session.id"] = clip(session)
    if version is not None:
        attributes["mcp.protocol.version"] = clip(version)
    tool = single.tool
    if tool is None:
        return method
    attributes["gen_ai.tool.name"] = clip(tool)
    attributes["gen_ai.operation.name"] = "execute_tool"
    return f"{method} {clip(tool)}"
