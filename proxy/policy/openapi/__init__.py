"""OpenAPI documents (docs/contract.md §8): a route's ``openapi:`` file names the operation an agent
called, the schema facts its envelope lacks (allowed values, a suggestion, an example request),
the operation to call instead of an undocumented one, and, with ``validate_requests: true``,
rejects an invalid request before the upstream sees it.

``document`` loads and checks a file; ``operations`` reads its operations and matches requests
to them; ``facts`` reads a schema's constraints and examples; ``validate`` checks a request;
``enrich`` adds what the document knows to an envelope.

May import, in the policy floor: ``envelope`` (the model, pointers), ``retry`` (whether
a check-first plan may resend), and the top modules ``evaluate``, ``exchange``,
``json_depth``, ``regex``, ``shorten``.
"""
