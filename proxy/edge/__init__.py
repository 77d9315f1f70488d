"""The edge: agent connections, upstream requests, relaying, tunnels, TLS, limits (aiohttp)."""
