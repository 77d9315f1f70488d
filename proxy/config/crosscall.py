"""``session:``, ``state:`` and ``circuit:`` in the config file (``proxy/config/settings.py``)."""

from __future__ import annotations

import os
import re
from typing import Any

from pydantic import Field, field_validator, model_validator
from yarl import URL

from proxy.config.model import Frozen

#: an HTTP header name (RFC 9110 token)
_HEADER = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")


def _headers(names: tuple[str, ...]) -> tuple[str, ...]:
    for name in names:
        if not _HEADER.match(name):
            raise ValueError(f"{name!r} is not an HTTP header name")
    return names


class SessionSettings(Frozen):
    """Who an agent is across calls, and when its repeats become a loop."""

    #: the first of these request headers present names the session
    headers: tuple[str, ...] = ("Mcp-Session-Id", "X-Agent-Session")
    #: else a keyed hash of the first of these present, plus the client address
    credential_headers: tuple[str, ...] = ("Authorization", "X-Api-Key")
    #: the hash key; replicas sharing a store need the same one (``MEND_SESSION_SECRET``).
    #: Unset: a random key per process
    secret: str | None = Field(
        default_factory=lambda: os.environ.get("MEND_SESSION_SECRET") or None, min_length=16
    )
    #: seconds an identical failure is remembered for ``repeat``
    window_s: int = Field(600, ge=1, le=86_400)
    #: identical non-retryable failures at which the action becomes ``escalate``
    escalate_after: int = Field(3, ge=2, le=1000)
    #: failures of one category, on different requests, that make a session pattern
    pattern_after: int = Field(3, ge=2, le=1000)

    _names = field_validator("headers", "credential_headers")(_headers)


class StateSettings(Frozen):
    """Where the cross-call state lives: ``memory`` (this process) or ``redis://host:port/db``.

    ``state: redis://...`` is short for ``state: {url: redis://...}``.
    """

    #: ``memory`` (this process) or ``redis://host:port/db`` (``--state``), shared by every replica
    url: str = "memory"
    #: the most a request waits for the store; past it, it is answered without the fields
    timeout_ms: int = Field(50, ge=1, le=10_000)
    #: the memory store's cap on remembered failures (least recently seen dropped first)
    max_entries: int = Field(100_000, ge=100, le=10_000_000)
    #: seconds between two log lines about a failing store
    error_log_interval_s: float = Field(60.0, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data: Any) -> Any:
        return {"url": data} if isinstance(data, str) else data

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if value == "memory":
            return value
        url = URL(value)
        if url.scheme not in ("redis", "rediss") or not url.host:
            raise ValueError(f"state {value!r} is 'memory' or a redis://host:port/db URL")
        return value

    @property
    def is_redis(self) -> bool:
        return self.url != "memory"


class CircuitSettings(Frozen):
    """Per operation, opt-in: after ``failures`` consecutive unreachable, timed-out or
    overloaded answers, answer at once for ``open_s`` seconds (or the upstream's longer
    ``Retry-After``)."""

    #: consecutive upstream failures that open an operation's circuit (0, the default: off,
    #: since an open circuit may refuse a request the upstream would have served)
    failures: int = Field(0, ge=0, le=10_000)
    #: seconds it stays open before one probe request may try the upstream
    open_s: float = Field(30.0, gt=0, le=3600)
    #: upstream answers that count as failures (overloaded, gateway errors), besides
    #: unreachable and timed out; 5xx only: a 4xx is the request's fault, never an outage
    statuses: tuple[int, ...] = (502, 503, 504)
    #: seconds between two looks at the shared store for circuits other replicas opened
    refresh_s: float = Field(1.0, gt=0, le=60)

    @field_validator("statuses")
    @classmethod
    def _statuses(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        for status in value:
            if not 500 <= status <= 599:
                raise ValueError(f"circuit status {status} is not a 5xx status")
        return value
