"""Per-request caches hold small fixed-size keys: what agents send cannot make them grow."""

from __future__ import annotations

import logging
import tracemalloc
from collections.abc import Callable

from proxy.observation.metrics import RepeatTracker
from proxy.observation.stdlib_logs import RepeatCounter, repeat_key

MB = 1 << 20
PATH_BYTES = 8 << 10


def fingerprint(n: int) -> str:
    """What proxy/runtime/proxy.py builds for a request whose path and query are 8 KB."""
    return f"203.0.113.7|POST|/orders/{n:06d}?q={'x' * PATH_BYTES}|512"


def retained(fill: Callable[[], object]) -> int:
    """Bytes still allocated after ``fill`` returns, for what it returned to be kept."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = fill()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert kept is not None
    return after - before


def test_repeat_tracker_holds_10000_long_paths_in_little_memory() -> None:
    """10,000 distinct 8 KB fingerprints: about 1.5 MB kept, not the 84 MB of the text itself."""

    def fill() -> RepeatTracker:
        tracker = RepeatTracker(capacity=10_000)
        for n in range(10_000):
            tracker.seen_again(fingerprint(n), "INTERNAL_ERROR", now=float(n))
        return tracker

    assert retained(fill) < 4 * MB


def test_repeat_tracker_still_notices_the_same_long_request_again() -> None:
    """The same 8 KB fingerprint failing the same way inside the window is a repeat."""
    tracker = RepeatTracker(window_s=60.0)
    assert not tracker.seen_again(fingerprint(1), "INTERNAL_ERROR", now=0.0)
    assert tracker.seen_again(fingerprint(1), "INTERNAL_ERROR", now=30.0)


def test_repeat_tracker_tells_apart_paths_that_differ_only_at_the_end() -> None:
    """Digests cover the whole fingerprint: a change in its last byte is another request."""
    tracker = RepeatTracker()
    tracker.seen_again(fingerprint(1) + "a", "INTERNAL_ERROR", now=0.0)
    assert not tracker.seen_again(fingerprint(1) + "b", "INTERNAL_ERROR", now=1.0)


def test_repeat_tracker_tells_apart_codes() -> None:
    """The same request failing another way is not a repeat of the first failure."""
    tracker = RepeatTracker()
    tracker.seen_again(fingerprint(1), "INTERNAL_ERROR", now=0.0)
    assert not tracker.seen_again(fingerprint(1), "UPSTREAM_TIMEOUT", now=1.0)


def test_repeat_tracker_takes_any_text_an_agent_can_send() -> None:
    """Lone surrogates and NULs in a path are hashed like any other characters."""
    tracker = RepeatTracker()
    odd = "1.2.3.4|GET|/\udcff\x00\ud800|None"
    assert not tracker.seen_again(odd, "BAD_REQUEST", now=0.0)
    assert tracker.seen_again(odd, "BAD_REQUEST", now=1.0)


def test_repeat_tracker_forgets_the_oldest_beyond_its_capacity() -> None:
    """Capacity bounds the entries: the first of capacity + 1 fingerprints is forgotten."""
    tracker = RepeatTracker(capacity=100)
    for n in range(101):
        tracker.seen_again(fingerprint(n), "INTERNAL_ERROR", now=float(n))
    assert not tracker.seen_again(fingerprint(0), "INTERNAL_ERROR", now=101.0)
    assert tracker.seen_again(fingerprint(100), "INTERNAL_ERROR", now=101.0)


def test_log_repeat_counter_holds_10000_distinct_long_messages_in_little_memory() -> None:
    """The stdlib log rate limit keeps at most 256 keys of 400 characters, however long the text."""

    def record(n: int) -> logging.LogRecord:
        text = f"{n:06d} " + "x" * PATH_BYTES
        return logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1, text, None, None)

    def fill() -> RepeatCounter:
        counter = RepeatCounter(interval=10.0)
        for n in range(10_000):
            counter.admit(repeat_key(record(n)), 0.0)
            counter.settle(0.0)
        return counter

    assert retained(fill) < 2 * MB
