"""The request id: the agent's when it sends one, else ours; it ties envelope, log and upstream."""

from __future__ import annotations

import random
import re
from collections.abc import Mapping

_SAFE = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")


def request_id(headers: Mapping[str, str], trace_id: str | None = None) -> str:
    """``X-Request-ID`` if sane, else the trace id of ``traceparent``, else ``trace_id`` (the new
    trace's, when tracing is on), else a new ``req_...`` id.

    A request id an agent sends ends up in headers, logs and every rendering, so one that is not
    a plain token is replaced rather than escaped.
    """
    given = headers.get("X-Request-ID")
    if given is not None and _SAFE.match(given):
        return given
    parent = headers.get("traceparent")
    if parent is not None and (match := _TRACEPARENT.match(parent.strip().lower())):
        parent_id = match.group(1)
        if parent_id != "0" * 32:
            return parent_id
    if trace_id is not None:
        return trace_id
    # an id, not a secret: random's generator (seeded from the OS, reseeded after fork) spares
    # every request the getrandom(2) call of ``secrets``
    return f"req_{random.getrandbits(64):016x}"
