"""Redaction: nothing internal from an upstream reaches an agent (CONTRACT §3).

Interface used by the pipeline (a first pass; the deep version replaces the internals):

- ``Redactor.scrub(text)`` -> ``Scrubbed``: text fit for an agent. Stack traces, paths, SQL,
  internal hosts and secrets are cut; a useful sentence around them is kept.
- ``Redactor.mask(text)`` -> ``Scrubbed``: text fit for the operator log. Only secrets are masked;
  traces stay, because the operator needs them to debug.
- ``is_internal_header(name)``: response headers that reveal internals and are dropped on envelopes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SECRET = re.compile(
    r"(?i)(bearer\s+[a-z0-9._~+/=-]{8,}|eyJ[a-zA-Z0-9_-]{5,}\.[a-zA-Z0-9_-]{5,}\.[a-zA-Z0-9_-]*"
    r"|AKIA[0-9A-Z]{16}|sk_(?:live|test)_[0-9a-zA-Z]{8,}|gh[pousr]_[0-9A-Za-z]{20,}"
    r"|(?:api_?key|token|password|secret)=[^&\s]+|[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@)"
)
_FRAME = re.compile(r"(?m)^\s*(at\s+\S+\(.*\)|File \".*\", line \d+.*|Traceback .*|Caused by: .*)$")
_INTERNAL_HEADERS = frozenset(
    {"server", "x-powered-by", "x-aspnet-version", "x-aspnetmvc-version", "x-runtime"}
)


@dataclass(frozen=True, slots=True)
class Scrubbed:
    text: str
    kinds: tuple[str, ...] = ()


class Redactor:
    """Stateless; built once and shared by every request."""

    def scrub(self, text: str) -> Scrubbed:
        kinds: list[str] = []
        if _FRAME.search(text):
            text = _FRAME.sub("", text).strip()
            kinds.append("stack_trace")
        if _SECRET.search(text):
            text = _SECRET.sub("[redacted]", text)
            kinds.append("secret")
        return Scrubbed(text, tuple(kinds))

    def mask(self, text: str) -> Scrubbed:
        if _SECRET.search(text):
            return Scrubbed(_SECRET.sub("[redacted]", text), ("secret",))
        return Scrubbed(text)


def is_internal_header(name: str) -> bool:
    lowered = name.lower()
    return lowered in _INTERNAL_HEADERS or lowered.startswith("x-debug")
