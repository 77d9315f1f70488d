"""The policy: what mend decides about an upstream's answer (never aiohttp).

Its rooms, each a package whose docstring says what it holds and what it may import
(``tests/test_layering.py`` holds them to it):

- ``rules``: rule files, their schema, checks and templates, matchers and queries, the compiled
  rules, the ordered rule set and the engine that loads it;
- ``envelope``: the envelope's model and its construction from a matched rule;
- ``retry``: whether and when to retry, and whether a request is safe to send again;
- ``render``: negotiation and the envelope as JSON, problem+json, prose and XML;
- ``protocols``: JSON-RPC, MCP, GraphQL and event streams;
- ``redaction``: the detectors and the redactor;
- ``openapi``: a route's OpenAPI document and what it adds;
- ``crosscall``: sessions, repeats, patterns and circuits across calls.

At the top, the modules every room shares or that compose them: ``exchange`` (one request and
its answer, as the policy sees them), ``evaluate`` (an answer to its envelope), ``explanation``
(``mend explain``), ``regex``, ``shorten``, ``json_depth`` and ``upstream_body``.
"""
