"""When to retry: ``retry_after_ms`` from the headers an upstream sends.

Sources, in order: ``Retry-After-Ms``, ``Retry-After`` (delta-seconds or HTTP-date, RFC 9110
§10.2.3), the IETF
``RateLimit`` header (``reset=``), ``RateLimit-Reset``, ``X-RateLimit-Reset`` (delta or epoch
seconds; GitHub and others send epoch). A value from the body comes from a rule instead.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime

#: Epoch timestamps are far larger than any sane delta; anything above this is an epoch.
_EPOCH_THRESHOLD = 1_000_000_000
_RESET_PARAM = re.compile(r"(?:^|[;,\s])reset=(\d+(?:\.\d+)?)")
_DECIMAL = re.compile(r"\d+(?:\.\d+)?")
_GO_DURATION = re.compile(
    r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+)ms)?"
)


def _seconds_from_duration(value: str) -> float | None:
    """OpenAI's x-ratelimit-reset-*: Go durations such as "1.8s", "6m0s", "20ms"."""
    match = _GO_DURATION.fullmatch(value.strip())
    if match is None or not any(match.groups()):
        return None
    hours, minutes, seconds, millis = (float(g) if g else 0.0 for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds + millis / 1000


def _seconds_from_reset(value: str, now: float) -> float | None:
    try:
        number = float(value.strip())
    except ValueError:
        return None
    if number >= _EPOCH_THRESHOLD * 1000:  # epoch in milliseconds
        number = number / 1000 - now
    elif number >= _EPOCH_THRESHOLD:
        number -= now
    return max(number, 0.0)


def _seconds_from_retry_after(value: str, now: float) -> float | None:
    value = value.strip()
    if _DECIMAL.fullmatch(value):  # RFC 9110 says integer; Shopify and others send "2.0"
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(when.timestamp() - now, 0.0)


def retry_after_ms(headers: Mapping[str, str], now: float | None = None) -> int | None:
    """Milliseconds the upstream asks the client to wait, or ``None`` when it does not say."""
    now = time.time() if now is None else now
    seconds: float | None = None
    if (value := headers.get("Retry-After-Ms")) is not None and _DECIMAL.fullmatch(value.strip()):
        seconds = float(value) / 1000  # Azure OpenAI: the same, in milliseconds
    if seconds is None and (value := headers.get("Retry-After")) is not None:
        seconds = _seconds_from_retry_after(value, now)
    if seconds is None and (value := headers.get("RateLimit")) is not None:
        match = _RESET_PARAM.search(value)
        seconds = float(match.group(1)) if match else None
    for name in ("RateLimit-Reset", "X-RateLimit-Reset", "X-Rate-Limit-Reset"):
        if seconds is not None:
            break
        if (value := headers.get(name)) is not None:
            seconds = _seconds_from_reset(value, now)
    for name in ("X-RateLimit-Reset-Requests", "X-RateLimit-Reset-Tokens"):
        if seconds is None and (value := headers.get(name)) is not None:
            seconds = _seconds_from_duration(value)
    return None if seconds is None else round(seconds * 1000)


def clamp(ms: int, maximum: int) -> int:
    return max(0, min(ms, maximum))
