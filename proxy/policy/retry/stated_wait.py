"""The wait an error body states, for a retryable envelope whose rule and headers name none.

Rules read a body's wait where they know the API (``retry_after_ms: "{{ wait | ms }}"``); this
reads it whichever rule matched (a generic "too many requests" rule included), from:

- JSON members at the top level or under ``error``: milliseconds (``retry_after_ms``,
  ``retryAfterMs``), seconds (``retry_after``, ``retryAfter``, ``retry_after_seconds``,
  ``retryAfterSeconds``, ``retry_in``), or the moment a limit resets (``reset_at``, ``resetAt``,
  ``reset``, ``reset_time``, ``resetTime``, ``rate_limit_reset``: epoch seconds or milliseconds
  told by size as ``proxy/policy/retry/retry.py`` does, a small number as a delta, ISO 8601 or an
  HTTP-date);
- else a sentence of the text: "try again in 20s", "retry after 2 minutes", "wait 1m30s" (RE2
  over the first ``TEXT_SCANNED`` characters).
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from proxy.policy.exchange import Exchange
from proxy.policy.regex import deferred
from proxy.policy.retry.retry import reset_seconds
from proxy.policy.rules.template import duration_ms

_MS_KEYS = ("retry_after_ms", "retryAfterMs")
_SECONDS_KEYS = (
    "retry_after",
    "retryAfter",
    "retry_after_seconds",
    "retryAfterSeconds",
    "retry_in",
)
_RESET_KEYS = ("reset_at", "resetAt", "reset", "reset_time", "resetTime", "rate_limit_reset")
#: Characters of a text body searched for a sentence stating the wait.
TEXT_SCANNED = 16384
#: Longest first: RE2 prefers the first alternative that lets the whole pattern match.
_UNIT = r"(?:milliseconds?|ms|minutes?|mins?|m|seconds?|secs?|s|hours?|hrs?|h)"
_AMOUNT = rf"\d{{1,9}}(?:\.\d{{1,6}})?\s?{_UNIT}"
_SENTENCE = deferred(
    r"(?i)\b(?:try again|retry|wait)(?: after| in| for)?\s{1,3}"
    rf"({_AMOUNT}(?:\s?{_AMOUNT}){{0,3}})\b"
)


def stated_wait_ms(exchange: Exchange, now: float | None = None) -> int | None:
    """Milliseconds the body of ``exchange`` asks the client to wait; ``None``: it does not say."""
    now = time.time() if now is None else now
    if exchange.is_json:
        for holder in _holders(exchange.json):
            seconds = _from_members(holder, now)
            if seconds is not None:
                return round(seconds * 1000)
    match = _SENTENCE.search(exchange.text[:TEXT_SCANNED]) if exchange.text else None
    if match is None:
        return None
    waited = duration_ms(match.group(1))
    return waited if isinstance(waited, int) else None


def _holders(document: Any) -> list[dict[str, Any]]:
    if not isinstance(document, dict):
        return []
    inner = document.get("error")
    return [document, inner] if isinstance(inner, dict) else [document]


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and len(value) <= 32:
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, int | float) and math.isfinite(value) and value >= 0:
        return float(value)
    return None


def _from_members(holder: dict[str, Any], now: float) -> float | None:
    for key in _MS_KEYS:
        if (number := _number(holder.get(key))) is not None:
            return number / 1000
    for key in _SECONDS_KEYS:
        if (number := _number(holder.get(key))) is not None:
            return number
    for key in _RESET_KEYS:
        value = holder.get(key)
        if (number := _number(value)) is not None:
            return reset_seconds(number, now)
        if isinstance(value, str) and (moment := _moment(value)) is not None:
            return reset_seconds(moment, now)
    return None


def _moment(text: str) -> float | None:
    """Epoch seconds of an ISO 8601 timestamp or an HTTP-date (UTC when no zone is given)."""
    text = text.strip()[:64]
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()
