"""When to retry: ``retry_after_ms`` from the headers an upstream sends.

Sources, in order: ``Retry-After-Ms``, ``Retry-After`` (delta-seconds or HTTP-date, RFC 9110
§10.2.3), the IETF ``RateLimit`` field with its ``RateLimit-Policy`` (every draft in use:
``proxy/policy/retry/ratelimit.py``), ``RateLimit-Reset``, ``X-RateLimit-Reset`` (delta or epoch
seconds; GitHub and others send epoch), hapi-rate-limit's ``X-RateLimit-UserReset`` and
``X-RateLimit-PathReset`` (epoch milliseconds). A value from the body comes from a rule instead.

A reset is told apart by its value (``reset_kind``): below 10^9 it is a delta in seconds, below
10^12 epoch seconds (2001 onwards), else epoch milliseconds. An absolute time (epoch, HTTP-date)
is measured against the upstream's own ``Date`` when the two clocks disagree by more than
``_SKEW_S``, since the reset is on the upstream's clock; and a stated reset is never a wait of 0:
one that looks past (clock skew, a window resetting as the answer left) waits ``MIN_STATED_S``.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Literal

from proxy.policy.retry import ratelimit

#: Epoch timestamps are far larger than any sane delta; anything above this is an epoch.
_EPOCH_THRESHOLD = 1_000_000_000
#: Epoch milliseconds start here (10^12 ms is 2001; 10^12 s is the year 33658).
_EPOCH_MS_THRESHOLD = _EPOCH_THRESHOLD * 1000
#: The wait for an absolute reset that looks already past: the upstream refused the request, so
#: its window had not reset when it answered.
MIN_STATED_S = 1.0
#: Clocks closer than this are taken to agree (``Date`` has a resolution of one second).
_SKEW_S = 2.0
#: Reset headers, in order of preference; hapi-rate-limit's are epoch milliseconds.
_RESET_HEADERS = (
    "RateLimit-Reset",
    "X-RateLimit-Reset",
    "X-Rate-Limit-Reset",
    "X-RateLimit-UserReset",
    "X-RateLimit-PathReset",
)
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


ResetKind = Literal["delta_s", "epoch_s", "epoch_ms"]


def reset_kind(number: float) -> ResetKind:
    """What a numeric reset value is, told by its size alone."""
    if number >= _EPOCH_MS_THRESHOLD:
        return "epoch_ms"
    if number >= _EPOCH_THRESHOLD:
        return "epoch_s"
    return "delta_s"


def _until(moment: float, now: float) -> float:
    """Seconds from ``now`` to an absolute ``moment`` the upstream stated; never 0."""
    return max(moment - now, MIN_STATED_S)


def reset_seconds(number: float, now: float) -> float | None:
    """Seconds to wait for a reset value of any kind; ``None`` for a negative or absurd one."""
    if not math.isfinite(number) or number < 0:
        return None
    kind = reset_kind(number)
    if kind == "epoch_ms":
        return _until(number / 1000, now)
    if kind == "epoch_s":
        return _until(number, now)
    return number


def _seconds_from_reset(value: str, now: float) -> float | None:
    try:
        number = float(value.strip())
    except ValueError:
        return None
    return reset_seconds(number, now)


def _http_date(value: str) -> float | None:
    try:
        when = parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    return None if when is None else when.timestamp()


def _seconds_from_retry_after(value: str, now: float) -> float | None:
    """A ``Retry-After`` HTTP date, as seconds from ``now`` (``retry_after_ms`` reads a number of
    seconds itself, before the clock)."""
    moment = _http_date(value.strip())
    return None if moment is None else _until(moment, now)


def _reference(headers: Mapping[str, str], now: float) -> float:
    """The clock absolute resets are measured on: the upstream's ``Date`` when ours disagrees."""
    date = headers.get("Date")
    stated = _http_date(date) if date else None
    if stated is None or abs(stated - now) <= _SKEW_S:
        return now
    return stated


def _field(headers: Mapping[str, str], name: str) -> str | None:
    """A header's value, its repeated lines joined as one field (RFC 9110 §5.3)."""
    getall = getattr(headers, "getall", None)
    if getall is None:
        return headers.get(name)
    values = getall(name, ())
    return ", ".join(values) if values else None


def retry_after_ms(headers: Mapping[str, str], now: float | None = None) -> int | None:
    """Milliseconds the upstream asks the client to wait, or ``None`` when it does not say.

    The clock (``_reference``: the upstream's ``Date`` read) is set only when a stated moment
    needs it: a ``Retry-After`` in seconds, the common case, never reads the ``Date``.
    """
    if (value := headers.get("Retry-After-Ms")) is not None and _DECIMAL.fullmatch(value.strip()):
        return round(float(value) / 1000 * 1000)  # Azure OpenAI: the same, in milliseconds
    after = headers.get("Retry-After")
    if after is not None and _DECIMAL.fullmatch(after.strip()):
        # RFC 9110 says integer; Shopify and others send "2.0"
        return round(float(after.strip()) * 1000)
    clock = _reference(headers, time.time() if now is None else now)
    seconds: float | None = None
    if after is not None:
        seconds = _seconds_from_retry_after(after, clock)
    if seconds is None and (value := _field(headers, "RateLimit")) is not None:
        seconds = ratelimit.wait_seconds(value, _field(headers, "RateLimit-Policy"))
        if seconds is None and (match := _RESET_PARAM.search(value)) is not None:
            seconds = float(match.group(1))  # draft 07 with the wrong separators
    for name in _RESET_HEADERS:
        if seconds is not None:
            break
        if (value := headers.get(name)) is not None:
            seconds = _seconds_from_reset(value, clock)
    for name in ("X-RateLimit-Reset-Requests", "X-RateLimit-Reset-Tokens"):
        if seconds is None and (value := headers.get(name)) is not None:
            seconds = _seconds_from_duration(value)
    return None if seconds is None else round(seconds * 1000)


def clamp(ms: int, maximum: int) -> int:
    return max(0, min(ms, maximum))
