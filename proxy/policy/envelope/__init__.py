"""The envelope: its model and the shared codes (``codes.yaml``), and how one is built from a
matched rule: variables, invalid fields with their pointers and constraints, the upstream's
detail, the scrubbing of upstream-derived text.

May import, in the policy floor: ``rules`` (compiled envelopes, templates, memories),
``retry`` (the advice an envelope carries), ``redaction``, ``protocols`` (the request's
arguments), and the top modules ``exchange``, ``regex``, ``shorten``."""
