"""``retry_after_ms`` reads the upstream's ``Date`` only when a stated moment needs a clock."""

from __future__ import annotations

from email.utils import formatdate

import pytest

from proxy.policy.retry import retry
from proxy.policy.retry.retry import retry_after_ms


def _no_clock(headers: object, now: float) -> float:
    raise AssertionError("the clock was read")


@pytest.mark.parametrize(
    "headers",
    [
        {"Retry-After": "7", "Date": "Fri, 27 Nov 2026 18:00:00 GMT"},
        {"Retry-After": " 2.5 ", "Date": "not a date"},
        {"Retry-After-Ms": "1500", "Retry-After": "Fri, 27 Nov 2026 18:00:00 GMT"},
    ],
)
def test_a_wait_in_seconds_never_reads_the_date(
    headers: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``Retry-After`` (or ``Retry-After-Ms``) that is a number of seconds is the wait as it
    stands: the upstream's ``Date`` is not parsed for it."""
    expected = retry_after_ms(headers, now=1_800_000_000.0)
    monkeypatch.setattr(retry, "_reference", _no_clock)
    assert retry_after_ms(headers, now=1_800_000_000.0) == expected
    assert expected in (7000, 2500, 1500)


def test_an_http_date_is_still_measured_on_the_upstreams_clock() -> None:
    """A ``Retry-After`` that is a moment is measured from the upstream's ``Date`` when the two
    clocks disagree, as before."""
    their_now = 1_800_000_000.0
    headers = {
        "Retry-After": formatdate(their_now + 30, usegmt=True),
        "Date": formatdate(their_now, usegmt=True),
    }
    assert retry_after_ms(headers, now=their_now + 3600) == 30_000


def test_a_reset_header_is_measured_on_the_clock() -> None:
    """Without a ``Retry-After``, an epoch reset is measured on the clock (``now``)."""
    headers = {"X-RateLimit-Reset": "1800000045"}
    assert retry_after_ms(headers, now=1_800_000_000.0) == 45_000
