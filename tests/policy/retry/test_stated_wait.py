"""The wait an error body states, read whatever rule matched; hostile bodies say nothing."""

from __future__ import annotations

import time
from typing import Any

import pytest

from proxy.policy.evaluate import recorded_exchange
from proxy.policy.retry.stated_wait import stated_wait_ms

NOW = 1_700_000_000.0


def _wait(body: str, content_type: str = "application/json") -> int | None:
    exchange = recorded_exchange(
        status=429, body=body.encode(), headers={"Content-Type": content_type}
    )
    return stated_wait_ms(exchange, now=NOW)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('{"retry_after": 3}', 3_000),
        ('{"retryAfter": "1.5"}', 1_500),
        ('{"error": {"retry_after_ms": 750}}', 750),
        ('{"reset": 20}', 20_000),  # small: a delta
        (f'{{"reset_at": {int(NOW) + 60}}}', 60_000),  # epoch seconds
        (f'{{"resetAt": {int(NOW * 1000) + 5_000}}}', 5_000),  # epoch milliseconds
        ('{"reset_at": "2023-11-14T22:14:20Z"}', 60_000),  # ISO 8601
        ('{"reset_time": "Tue, 14 Nov 2023 22:14:20 GMT"}', 60_000),  # HTTP-date
        ('{"reset_at": "2023-11-14T22:00:00Z"}', 1_000),  # past: never a wait of 0
    ],
)
def test_json_members(body: str, expected: int) -> None:
    """Each member form gives the wait it states."""
    assert _wait(body) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Please try again in 20s.", 20_000),
        ("Rate limit reached. Please try again in 1m30s.", 90_000),
        ("retry after 250ms", 250),
        ("Wait 2 hours before sending more.", 7_200_000),
    ],
)
def test_sentences(text: str, expected: int) -> None:
    """A sentence that says when to try again gives that wait."""
    assert _wait(text, "text/plain") == expected


@pytest.mark.parametrize(
    "body",
    [
        '{"retry_after": -5}',
        '{"retry_after": true}',
        '{"retry_after": "' + "9" * 400 + '"}',
        '{"retry_after": 1e999}',
        '{"reset_at": "not a date"}',
        '{"error": "retry_after"}',
        "[1, 2, 3]",
        "try again " + "9" * 50_000 + "s",
        "try again in soon " * 5_000,
    ],
)
def test_what_is_not_a_wait_says_nothing(body: Any) -> None:
    """Negative, boolean, absurd or malformed values, and hostile text, state no wait."""
    assert _wait(body) is None


def test_a_sentence_adds_at_most_four_amounts() -> None:
    """A run of amounts is read up to four of them: an upstream cannot make the wait grow."""
    assert _wait("try again in " + "1s " * 20_000, "text/plain") == 4_000


def test_a_megabyte_of_near_sentences_is_read_at_once() -> None:
    """A body of repeated "try again in 9" with no unit is searched in linear time (16 KiB)."""
    start = time.perf_counter()
    assert _wait("try again in 9 " * 70_000, "text/plain") is None
    assert time.perf_counter() - start < 0.5
