"""MCP tools from a route's OpenAPI document (docs/contract.md §9): ``mcp_tools: PATH`` serves the
document's operations as tools whose calls go through mend's own pipeline.

``schema`` makes a document's schemas standalone JSON Schema; ``tools`` lists an operation as a
tool; ``arguments`` turns a call's arguments into the HTTP request; ``internal`` runs that
request through the proxy in-process; ``results`` turns the answer into a tool result;
``asgi`` hands an aiohttp request to the MCP SDK's server (``sdk``); ``server`` joins them per
route.
"""
