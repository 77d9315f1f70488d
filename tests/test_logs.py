"""Log lines: JSON with an ISO UTC timestamp; batched writes that lose and reorder nothing."""

from __future__ import annotations

import asyncio
import io
import json
import re
import threading
from datetime import UTC, datetime

import pytest

from proxy.observation.logs import LineWriter, UtcTimestamp, make_logger


class CountingStream(io.StringIO):
    """A StringIO that counts how often it was written to and flushed."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.flushes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)

    def flush(self) -> None:
        self.flushes += 1
        super().flush()


def events(stream: io.StringIO) -> list[str]:
    return [json.loads(line)["event"] for line in stream.getvalue().splitlines()]


def test_timestamp_is_iso_utc_with_microseconds_and_current() -> None:
    """The stamp parses as ISO 8601 UTC and is the time of the call, in the same second."""
    stamp = UtcTimestamp()
    before = datetime.now(UTC)
    value = stamp(None, "info", {})["timestamp"]
    after = datetime.now(UTC)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", value)
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    assert before <= parsed <= after


def test_timestamps_within_one_second_keep_increasing() -> None:
    """The cached second does not freeze the microseconds: later calls stamp later times."""
    stamp = UtcTimestamp()
    values = [stamp(None, "info", {})["timestamp"] for _ in range(2000)]
    assert values == sorted(values)
    assert len(set(values)) > 1


def test_unbatched_writer_flushes_every_line() -> None:
    """flush_interval 0 (tests, CLI tools): every line is written and flushed at once."""
    out = CountingStream()
    log = make_logger(out)
    log.info("one")
    log.info("two")
    assert events(out) == ["one", "two"]
    assert out.flushes == 2


async def test_batched_info_lines_arrive_together_after_the_interval() -> None:
    """On the loop, info lines wait for the timer and are then written in one write."""
    out = CountingStream()
    log = make_logger(LineWriter(out, flush_interval=0.05))
    for n in range(10):
        log.info("request", n=n)
    assert out.getvalue() == ""
    await asyncio.sleep(0.15)
    assert events(out) == ["request"] * 10
    assert out.writes == 1


async def test_a_warning_writes_everything_waiting_in_order() -> None:
    """A problem is never held back, and the info lines before it come out first."""
    out = CountingStream()
    log = make_logger(LineWriter(out, flush_interval=60))
    log.info("first")
    log.warning("problem")
    assert events(out) == ["first", "problem"]


async def test_a_full_batch_is_written_without_waiting() -> None:
    """Memory stays bounded under load: max_lines waiting lines are written at once."""
    out = CountingStream()
    log = make_logger(LineWriter(out, flush_interval=60, max_lines=3))
    for name in ("a", "b", "c", "d"):
        log.info(name)
    assert events(out) == ["a", "b", "c"]


def test_lines_logged_off_the_loop_are_written_at_once() -> None:
    """No event loop (a CLI command): nothing would flush later, so nothing waits."""
    out = CountingStream()
    log = make_logger(LineWriter(out, flush_interval=60))
    log.info("no loop here")
    assert events(out) == ["no loop here"]


async def test_lines_from_a_thread_and_the_loop_are_all_kept() -> None:
    """A reload logging from a worker thread while requests log on the loop loses no line."""
    out = io.StringIO()
    writer = LineWriter(out, flush_interval=0.01)
    log = make_logger(writer)

    def from_thread() -> None:
        for n in range(500):
            log.info("thread", n=n)

    thread = threading.Thread(target=from_thread)
    thread.start()
    for n in range(500):
        log.info("loop", n=n)
        if n % 50 == 0:
            await asyncio.sleep(0)
    thread.join()
    writer.flush()
    seen = events(out)
    assert seen.count("thread") == 500
    assert seen.count("loop") == 500


@pytest.mark.parametrize("value", [None, "x"])
def test_none_fields_are_left_out(value: str | None) -> None:
    """A field logged as None is absent, not null: lines carry what is known."""
    out = io.StringIO()
    make_logger(out).info("request", code=value)
    line = json.loads(out.getvalue())
    assert ("code" in line) is (value is not None)
