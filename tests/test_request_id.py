"""The request id an agent sends is kept when it is safe, else replaced."""

from __future__ import annotations

import re

import pytest

from proxy.request_id import request_id

NEW = re.compile(r"^req_[0-9a-f]{16}$")


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"X-Request-ID": "abc-123"}, "abc-123"),
        (
            {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
            "4bf92f3577b34da6a3ce929d0e0e4736",
        ),
        (
            {
                "X-Request-ID": "ok.1",
                "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            },
            "ok.1",
        ),
    ],
)
def test_given_ids_are_kept(headers: dict[str, str], expected: str) -> None:
    """X-Request-ID wins, then the traceparent's trace id."""
    assert request_id(headers) == expected


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"X-Request-ID": "<script>alert(1)</script>"},
        {"X-Request-ID": "x" * 200},
        {"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"},
        {"traceparent": "garbage"},
    ],
)
def test_unsafe_or_missing_ids_are_replaced(headers: dict[str, str]) -> None:
    """Anything not a plain token gets a fresh id instead of being echoed."""
    assert NEW.match(request_id(headers))
