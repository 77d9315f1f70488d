"""The rules: rule files read and checked against their schema (``rulefile``, ``rulespec``,
``rulecheck``), their templates, the matchers and queries a rule tests, one compiled rule
(``rule``), the ordered rule set (``ruleset``) with the rules a response can meet
(``candidates``) and what it matched before (``match_memory``), and the engine that loads
the packs, the fallbacks and mend's own envelopes (``ruleengine``, ``fallbacks.yaml``,
``own_errors.yaml``).

May import, in the policy floor: ``envelope`` (the model a rule names, pointers),
``redaction`` and ``openapi`` (the engine loads their detectors and specs), and the top
modules ``exchange``, ``json_depth``, ``regex``."""
