"""The protocols an agent may speak through mend, each a small class with one interface.

``base.Protocol`` is the interface: what a request says about its protocol, what to read in a
response, how to split a response into error units, and how to render an envelope back into the
protocol's own shape. ``jsonrpc``, ``mcp`` and ``graphql`` implement it; ``detect`` picks one per
request (or takes the route's), ``sse`` rewrites an event stream event by event.

May import, in the policy floor: ``envelope`` (the model each protocol renders), ``render``
(JSON text, the rendering an MCP tool result carries), and the top modules ``exchange``,
``json_depth``, ``regex``.
"""
