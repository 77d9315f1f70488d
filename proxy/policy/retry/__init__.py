"""The retry advice: whether and when to retry, rate-limit fields and reset forms, waits the
upstream stated, and whether a request is safe to send again.

May import, in the policy floor: ``rules`` (matchers, templates), and the top modules
``exchange``, ``regex``."""
