"""``mend test``: rule test cases (like ``promtool test rules``), and recorded-response coverage.

A case file is YAML::

    cases:
      - name: fastapi 422 lists every field
        request: {method: POST, path: /api/orders, headers: {...}}   # optional
        route: {success_rules: ["slack.*"]}                          # optional
        rules: [../extra.yaml]     # optional; relative to this file, loaded before the packs
        response:
          status: 422
          headers: {Content-Type: application/json}
          json: {detail: [...]}    # or body: "raw text" (at most one; neither: no body)
        expect:                    # a subset of the envelope's ``error`` object
          rule: fastapi.validation
          code: VALIDATION_FAILED
          invalid_fields: [{field: /qty, received: -1}, {field: /sku}]
        # or:  expect: passthrough (no rule may match: a 2xx the proxy leaves untouched)

A case may state the ``protocol`` the agent speaks (``http`` when it does not; ``auto`` detects
it as the proxy does) and the request's body (``request: {json: ...}`` or ``body:``): then the
response is answered in that protocol (``proxy/policy/protocols``), ``expect`` is the first error's
envelope (``expect_units`` lists one subset per error, in order) and ``expect_response`` a subset
of the JSON the agent receives::

      - name: a variable of the wrong type points at /variables/qty
        protocol: graphql
        request: {method: POST, path: /graphql, json: {query: "...", variables: {qty: x}}}
        response: {status: 200, json: {data: null, errors: [...]}}
        expect: {invalid_fields: [{field: /variables/qty}]}
        expect_response: {data: null, errors: [{extensions: {code: VALIDATION_FAILED}}]}

``expect`` is compared as a subset: every key it names must be in the envelope with an equal
value; a nested mapping is again a subset; a list must have as many elements as the envelope's and
each element is compared as a subset of the element at the same position. Scalars compare exactly
(``1`` is not ``true``, ``1`` equals ``1.0``).

Each case runs through ``proxy.policy.evaluate`` -- the very path the proxy takes -- against an
engine
built from the case's rules, the ``--rules`` files, the shipped packs and the built-in fallbacks.

Redaction: ``expect`` may also list strings the agent must not see (``masked``) or must still see
(``kept``) anywhere in the envelope (and the protocol's answer), and strings the operator's log
line must not or must hold (``log_masked``, ``log_kept``: the upstream body, masked). A case may
add ``redaction:`` (the config's keys: secrets, internal_domains, allow, ...), and instead of a
``response`` give ``redact: "some text"``, checked as one string of an envelope and as the log::

      - name: ACME tokens never reach an agent; order ids do
        redaction: {secrets: ["acme_live_[A-Za-z0-9]{16,}"], allow: ["ORD-[A-Za-z0-9]{28}"]}
        redact: "charge ORD-8f3kQ9zX2mW7vB4nR1tY6uP0aS5d failed: acme_live_0123456789abcdef"
        expect: {masked: [acme_live_0123456789abcdef], kept: [ORD-8f3kQ9zX2mW7vB4nR1tY6uP0aS5d]}

Recorded responses for ``mend check --coverage DIR``: see ``load_recorded``.
"""
