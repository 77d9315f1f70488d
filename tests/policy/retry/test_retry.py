"""retry_after_ms from the headers upstreams send."""

from __future__ import annotations

from email.utils import formatdate

import pytest
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict, CIMultiDictProxy

from proxy.policy.retry.retry import MIN_STATED_S, clamp, reset_kind, reset_seconds, retry_after_ms

NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "7"}, 7000),
        ({"Retry-After": "0"}, 0),
        ({"Retry-After": "Tue, 14 Nov 2023 22:13:40 GMT"}, 20_000),
        # a stated date that looks past (skew, a window resetting as the answer left): 1 s, not 0
        ({"Retry-After": "Tue, 14 Nov 2023 22:00:00 GMT"}, 1000),
        ({"X-RateLimit-Reset": str(int(NOW) - 5)}, 1000),
        ({"X-RateLimit-UserReset": str(int(NOW * 1000) + 42_000)}, 42_000),  # hapi: epoch ms
        ({"X-RateLimit-PathReset": str(int(NOW * 1000) + 7_500)}, 7_500),
        # the upstream's clock is 10 minutes behind ours: its reset is on its clock
        (
            {
                "X-RateLimit-Reset": str(int(NOW) - 600 + 30),
                "Date": "Tue, 14 Nov 2023 22:03:20 GMT",
            },
            30_000,
        ),
        (
            {
                "Retry-After": "Tue, 14 Nov 2023 22:05:20 GMT",
                "Date": "Tue, 14 Nov 2023 22:03:20 GMT",
            },
            120_000,
        ),
        ({"Retry-After": "soon"}, None),
        ({"RateLimit": "limit=100, remaining=0, reset=30"}, 30_000),
        ({"RateLimit-Reset": "12"}, 12_000),
        ({"X-RateLimit-Reset": str(int(NOW) + 90)}, 90_000),  # GitHub: epoch seconds
        ({"X-RateLimit-Reset": str(int(NOW * 1000) + 5000)}, 5_000),  # epoch milliseconds
        ({"X-RateLimit-Reset": "1.5"}, 1_500),
        ({"Retry-After": "3", "X-RateLimit-Reset": "60"}, 3000),  # Retry-After wins
        ({"Retry-After": "2.0"}, 2000),
        ({"Retry-After-Ms": "1500", "Retry-After": "2"}, 1500),
        ({"X-RateLimit-Reset-Requests": "1.8s"}, 1800),
        ({"X-RateLimit-Reset-Tokens": "6m0s"}, 360_000),
        ({"X-RateLimit-Reset-Requests": "20ms"}, 20),
        ({}, None),
    ],
)
def test_retry_after_ms(headers: dict[str, str], expected: int | None) -> None:
    """Each header form gives the wait it states, relative to now."""
    assert retry_after_ms(headers, now=NOW) == expected


def test_clamp_caps_the_wait() -> None:
    """A wait above the configured maximum is cut to it."""
    assert clamp(10_000_000, 3_600_000) == 3_600_000


#: Now, anywhere from 2001 to 2100, and a wait from 0 to 10 days, in milliseconds.
_NOWS = st.floats(min_value=1_000_000_001, max_value=4_102_444_800)
_WAITS_MS = st.integers(min_value=0, max_value=10 * 86_400_000)


@given(now=_NOWS, wait_ms=_WAITS_MS)
def test_epoch_seconds_are_told_from_their_value(now: float, wait_ms: int) -> None:
    """A reset written as epoch seconds is read as one, and gives its wait within a second."""
    reset = int(now + wait_ms / 1000)
    assert reset_kind(reset) == "epoch_s"
    got = reset_seconds(reset, now)
    assert got is not None
    assert abs(got - max(reset - now, MIN_STATED_S)) < 1e-6
    assert got >= MIN_STATED_S  # a stated reset is never a wait of 0
    assert abs(got - wait_ms / 1000) <= 1 + MIN_STATED_S


@given(now=_NOWS, wait_ms=_WAITS_MS)
def test_epoch_milliseconds_are_told_from_their_value(now: float, wait_ms: int) -> None:
    """A reset written as epoch milliseconds (hapi) is read as one, to the millisecond."""
    reset = round(now * 1000) + wait_ms
    assert reset_kind(reset) == "epoch_ms"
    got = reset_seconds(reset, now)
    assert got is not None
    assert got >= MIN_STATED_S
    assert abs(got - max(wait_ms / 1000, MIN_STATED_S)) <= 0.001


@given(now=_NOWS, wait=st.floats(min_value=0, max_value=30 * 86_400, allow_nan=False))
def test_deltas_are_told_from_their_value(now: float, wait: float) -> None:
    """A delta in seconds (up to a month) stays a delta, whatever the time is."""
    assert reset_kind(wait) == "delta_s"
    assert reset_seconds(wait, now) == wait


@given(value=st.one_of(st.floats(max_value=-1e-9), st.just(float("nan")), st.just(float("inf"))))
def test_nonsense_resets_say_nothing(value: float) -> None:
    """A negative, NaN or infinite reset gives no wait at all (the default applies)."""
    assert reset_seconds(value, 1_700_000_000.0) is None


@given(wait_s=st.integers(min_value=1, max_value=86_400), skew_s=st.integers(-3600, 3600))
def test_http_date_is_read_on_the_upstreams_clock(wait_s: int, skew_s: int) -> None:
    """A Retry-After HTTP-date (503 maintenance pages) gives its wait on the upstream's clock,
    whatever the skew between the clocks; within a second (HTTP-dates have no fraction)."""
    their_now = int(NOW) + skew_s
    headers = {
        "Retry-After": formatdate(their_now + wait_s, usegmt=True),
        "Date": formatdate(their_now, usegmt=True),
    }
    got = retry_after_ms(headers, now=NOW)
    assert got is not None
    assert abs(got - wait_s * 1000) <= (0 if abs(skew_s) > 2 else abs(skew_s) * 1000)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        # drafts 08 and later: a List, one item per policy
        ({"RateLimit": '"default";r=0;t=30'}, 30_000),
        ({"RateLimit": '"burst";r=0;t=5, "day";r=900;t=3600'}, 5_000),
        ({"RateLimit": '"burst";r=0;t=5, "day";r=0;t=3600'}, 3_600_000),  # longest exhausted
        ({"RateLimit": '"burst";r=3;t=5, "day";r=900;t=3600'}, 5_000),  # none exhausted: soonest
        ({"RateLimit": "default;r=0;t=2.5"}, 2_500),  # a Token name, a Decimal reset
        # no reset stated: the exhausted policy's window from RateLimit-Policy
        ({"RateLimit": '"hour";r=0', "RateLimit-Policy": '"hour";q=1000;w=3600'}, 3_600_000),
        ({"RateLimit": '"hour";r=0', "RateLimit-Policy": '"other";q=10;w=60'}, None),
        # draft 07: a Dictionary
        ({"RateLimit": "limit=100, remaining=0, reset=30", "RateLimit-Policy": "100;w=60"}, 30_000),
        # drafts 03 to 06: separate fields
        ({"RateLimit-Limit": "100", "RateLimit-Remaining": "0", "RateLimit-Reset": "45"}, 45_000),
        # values that do not parse, or state nothing usable, say nothing
        ({"RateLimit": '"default";r=0;t=-5'}, None),
        ({"RateLimit": '"default";r=0;t=?1'}, None),
        ({"RateLimit": '"unterminated;r=0;t=30'}, None),
        ({"RateLimit": "(" * 5000}, None),
        # Retry-After still wins over what a RateLimit field says
        ({"RateLimit": '"default";r=0;t=30', "Retry-After": "4"}, 4_000),
    ],
)
def test_ietf_ratelimit_fields(headers: dict[str, str], expected: int | None) -> None:
    """Each draft's RateLimit / RateLimit-Policy shape gives the wait it states."""
    assert retry_after_ms(headers, now=NOW) == expected


def test_repeated_ratelimit_lines_are_one_field() -> None:
    """Two RateLimit header lines are one List (RFC 9110 §5.3): both policies count."""
    headers = CIMultiDictProxy(
        CIMultiDict([("RateLimit", '"burst";r=1;t=5'), ("RateLimit", '"day";r=0;t=600')])
    )
    assert retry_after_ms(headers, now=NOW) == 600_000
