"""The wait the IETF ``RateLimit`` and ``RateLimit-Policy`` fields state.

draft-ietf-httpapi-ratelimit-headers is sent in three shapes:

- drafts 08 and later: ``RateLimit: "default";r=0;t=30``, a List with one item per policy (``r``
  remaining, ``t`` seconds until it resets), and ``RateLimit-Policy: "default";q=100;w=60``
  (``q`` quota, ``w`` window in seconds);
- draft 07 (express-rate-limit's ``draft-7``): ``RateLimit: limit=100, remaining=0, reset=30``,
  a Dictionary, with ``RateLimit-Policy: 100;w=60``;
- drafts 03 to 06: ``RateLimit-Limit``, ``RateLimit-Remaining`` and ``RateLimit-Reset`` apart
  (``proxy/policy/retry/retry.py`` reads the last as any reset header).

Values are parsed by http-sf (RFC 9651 Structured Fields); one that does not parse says nothing
here. Of several policies, the wait is that of the longest exhausted one (``r=0``): the request
was refused until it resets; with none exhausted, the soonest reset.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import http_sf
from http_sf.types import Token

#: Characters of a field parsed; an upstream's longer value is cut (and then may not parse).
MAX_FIELD = 4096


def wait_seconds(ratelimit: str | None, policy: str | None) -> float | None:
    """Seconds until the ``RateLimit`` field (with its ``RateLimit-Policy``) lets a request
    through; ``None`` when it does not say."""
    if not ratelimit:
        return None
    items = _parse(ratelimit, "list")
    if isinstance(items, list):
        return _from_items(items, _windows(policy))
    members = _parse(ratelimit, "dictionary")
    if isinstance(members, dict):  # draft 07
        reset = members.get("reset")
        return _seconds(reset[0]) if isinstance(reset, tuple) else None
    return None


def _parse(value: str, kind: str) -> Any:
    try:
        return http_sf.parse(value[:MAX_FIELD].encode("latin-1", "replace"), tltype=kind)
    except ValueError:  # http_sf.StructuredFieldError
        return None


def _seconds(value: Any) -> float | None:
    """A non-negative number of seconds (an Integer or Decimal); ``None`` for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        return None
    number = float(value)
    return number if math.isfinite(number) and number >= 0 else None


def _windows(policy: str | None) -> dict[str, float]:
    """Each named policy's window (``w``) from ``RateLimit-Policy``."""
    items = _parse(policy, "list") if policy else None
    if not isinstance(items, list):
        return {}
    windows: dict[str, float] = {}
    for item in items:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], dict):
            window = _seconds(item[1].get("w"))
            if window is not None and isinstance(item[0], str | Token):  # a policy's name
                windows[str(item[0])] = window
    return windows


def _from_items(items: list[Any], windows: dict[str, float]) -> float | None:
    exhausted: list[float] = []
    others: list[float] = []
    for item in items:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], dict)):
            continue  # an inner list: not a policy
        name, params = item
        remaining = _seconds(params.get("r"))
        reset = _seconds(params.get("t"))
        if reset is None and remaining == 0 and isinstance(name, str | Token):
            reset = windows.get(str(name))  # no reset stated: at most one window away
        if reset is not None:
            (exhausted if remaining == 0 else others).append(reset)
    if exhausted:
        return max(exhausted)
    return min(others) if others else None
