"""retry_after_ms from the headers upstreams send."""

from __future__ import annotations

import pytest

from proxy.retry import clamp, retry_after_ms

NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "7"}, 7000),
        ({"Retry-After": "0"}, 0),
        ({"Retry-After": "Tue, 14 Nov 2023 22:13:40 GMT"}, 20_000),
        ({"Retry-After": "Tue, 14 Nov 2023 22:00:00 GMT"}, 0),  # in the past: now
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
