"""The policy: rules, matching, envelope, rendering, protocols, redaction (never aiohttp)."""
