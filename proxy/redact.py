"""Redaction moved to ``proxy.redaction`` (declared detectors, ``rules/redaction/*.yaml``).

This module keeps the names the pipeline imported from here.
"""

from __future__ import annotations

from proxy.redaction import KINDS, NEUTRAL, Redactor, Scrubbed, is_internal_header

__all__ = ["KINDS", "NEUTRAL", "Redactor", "Scrubbed", "is_internal_header"]
