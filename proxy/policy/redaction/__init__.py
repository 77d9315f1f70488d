"""Redaction: nothing internal from an upstream reaches an agent (docs/contract.md §3).

Declared detectors (``rules/redaction/*.yaml``, and an operator's ``redaction:`` additions) run by
a small engine. ``engine.Redactor`` is the interface the pipeline uses; ``detectors`` loads and
validates the files, ``functions`` holds the named checks they reference, ``sets`` compiles a
set, ``explain`` tells what each detector did to a text (``mend explain --redact``).

May import, in the policy floor: ``rules`` (the bounded YAML reading of rule files), and
the top modules ``json_depth``, ``regex``, ``shorten``.
"""

from __future__ import annotations

from proxy.policy.redaction.detectors import KINDS
from proxy.policy.redaction.engine import NEUTRAL, Redactor, Scrubbed
from proxy.policy.redaction.headers import is_internal_header

__all__ = ["KINDS", "NEUTRAL", "Redactor", "Scrubbed", "is_internal_header"]
