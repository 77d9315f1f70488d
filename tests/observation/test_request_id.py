"""The request id an agent sends is kept when it is safe, else replaced."""

from __future__ import annotations

import os
import re

import pytest

from proxy.observation.request_id import request_id

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


def test_new_ids_do_not_repeat() -> None:
    """Ten thousand fresh ids are ten thousand different ids."""
    ids = {request_id({}) for _ in range(10_000)}
    assert len(ids) == 10_000


def test_a_forked_worker_does_not_repeat_its_parents_ids() -> None:
    """--workers processes make their own ids: the generator is reseeded in a forked child."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next id and leave at once
        os.write(write, request_id({}).encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.waitpid(pid, 0)
    assert NEW.match(child)
    assert child != request_id({})
