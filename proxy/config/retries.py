"""A route's retry policy (docs/retries.md): what mend sends again before the agent sees a failure.

As Envoy's ``retry_policy``: how many tries, on which outcomes, each try's timeout, the back-off
between tries, the waits an upstream states that mend honours, and a budget that keeps retries a
share of the requests in flight. Which requests may be sent again is not configured here: only
those the envelope would call ``retryable`` (docs/contract.md §1), so mend and its envelope never
disagree (``proxy/runtime/retries.py``).
"""

from __future__ import annotations

import difflib
from typing import Literal, get_args

from pydantic import Field, field_validator

from proxy.config.model import Frozen

#: What a try can end in that a policy may retry: no connection (nothing was sent), the
#: connection lost after the request went, no response head in time; or a status.
Outcome = Literal["connect-failure", "reset", "timeout", "gateway-error"]
OUTCOMES: tuple[str, ...] = get_args(Outcome)
#: ``gateway-error``'s statuses (Envoy's).
GATEWAY_ERRORS = frozenset({502, 503, 504})


class BackOff(Frozen):
    """Envoy's exponential back-off with full jitter: before retry ``n`` (from 0), a wait drawn
    uniformly from 0 to ``min(max_ms, base_ms * 2**n)``."""

    #: milliseconds of the first retry's wait at most
    base_ms: int = Field(25, ge=1, le=60_000)
    #: milliseconds no wait exceeds
    max_ms: int = Field(250, ge=1, le=600_000)


class RetryBudget(Frozen):
    """Envoy's retry budget: a route's retries in flight stay within ``percent`` of its requests
    in flight, or ``min_concurrent``, whichever is more; so an outage never multiplies the load
    on an upstream that is already failing."""

    #: the share of the route's requests in flight that may be retries at once
    percent: float = Field(20.0, ge=0, le=100)
    #: retries in flight always allowed, however few requests are
    min_concurrent: int = Field(3, ge=0, le=10_000)


class Retries(Frozen):
    """A retry policy; the top-level one is every route's default, a route's replaces it whole."""

    #: tries in all, the first included; 1 turns retries off
    attempts: int = Field(2, ge=1, le=10)
    #: what a try may end in for mend to try again: ``connect-failure`` (refused, connect failed
    #: or timed out: nothing was sent), ``reset`` (the connection lost after the request went),
    #: ``timeout`` (no response head within the try's timeout), ``gateway-error`` (502, 503,
    #: 504), or a status (400-599); only what the envelope would call retryable is retried
    retry_on: tuple[Outcome | int, ...] = ("connect-failure", "reset", 503, 429)
    #: seconds each try may wait for its response head (default: the route's ``read_timeout``);
    #: every try stays within ``read_timeout`` of the request's arrival
    per_try_timeout: float | None = Field(None, gt=0, le=3600)
    #: the wait between two tries when the upstream states none
    back_off: BackOff = BackOff()
    #: milliseconds of a wait the upstream states (``Retry-After``, a rate-limit reset, its body)
    #: that mend waits before trying again; a longer one goes to the agent at once
    retry_after_max_ms: int = Field(1000, ge=0, le=60_000)
    #: how many retries may be in flight at once, per route
    budget: RetryBudget = RetryBudget()
    #: bytes of a request body kept to send it again; a longer body is not retried
    body_max_bytes: int = Field(65536, ge=0, le=64 << 20)
    #: answer ``X-Mend-Attempt-Count: N`` (the tries made) on every proxied response, as Envoy's
    #: ``include_attempt_count_in_response``
    attempt_count_header: bool = False

    @field_validator("retry_on", mode="before")
    @classmethod
    def _outcomes(cls, value: object) -> object:
        """Each entry an outcome mend names or a 4xx/5xx status, said as the operator wrote it."""
        if not isinstance(value, list | tuple):
            return value
        for entry in value:
            if isinstance(entry, bool) or not isinstance(entry, int | str):
                raise ValueError(f"retry_on entry {entry!r} is not an outcome or a status")
            if isinstance(entry, int) and not 400 <= entry <= 599:
                raise ValueError(f"retry_on status {entry} is not a 4xx or 5xx status")
            if isinstance(entry, str) and entry not in OUTCOMES:
                near = difflib.get_close_matches(entry, OUTCOMES, n=1)
                said = f"; did you mean {near[0]!r}?" if near else ""
                raise ValueError(
                    f"retry_on entry {entry!r} is not one of {', '.join(OUTCOMES)} or a "
                    f"status{said}"
                )
        return value

    @property
    def enabled(self) -> bool:
        """Whether a second try may ever be made."""
        return self.attempts > 1 and bool(self.retry_on)

    def statuses(self) -> frozenset[int]:
        """The statuses retried (``gateway-error`` spelt out)."""
        named = {entry for entry in self.retry_on if isinstance(entry, int)}
        if "gateway-error" in self.retry_on:
            named |= GATEWAY_ERRORS
        return frozenset(named)
