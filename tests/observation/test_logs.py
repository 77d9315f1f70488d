"""Log lines: JSON with an ISO UTC timestamp; batched writes that lose and reorder nothing."""

from __future__ import annotations

import asyncio
import io
import json
import re
import threading
from datetime import UTC, datetime
from typing import Any

import pytest
import structlog

from proxy.observation import logs
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


def _chain_logger(out: io.StringIO) -> Any:
    """The logger ``make_logger`` made before issue 29: structlog's chain for every line."""
    return structlog.wrap_logger(
        LineWriter(out),
        processors=[
            structlog.processors.add_log_level,
            logs._exception_field,
            UtcTimestamp(),
            logs._drop_none,
            structlog.processors.JSONRenderer(serializer=logs._orjson_dumps),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(0),
    ).bind()


class _Odd:
    def __str__(self) -> str:
        return "odd value"


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {
            "request_id": "req_1",
            "route": "default",
            "method": "GET",
            "path": "/err500",
            "status": 500,
            "outcome": "envelope",
            "latency_ms": 1.234,
            "upstream_status": 500,
            "upstream_ms": 0.5,
            "code": "upstream.internal",
            "rule": "spring.internal",
            "upstream_body": '{"trace": "at a.B(C.java:1)\\n\\tü \\u2028"}',
        },
        {"code": None, "rule": "r", "n": 0, "flag": False, "nested": {"a": [1, None]}},
        {"level": "custom", "timestamp": "earlier", "odd": _Odd(), "tuple": (1, 2)},
    ],
)
def test_fast_info_line_is_the_chains_line(
    fields: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request's ``info`` line skips structlog's chain and is the same text, byte for byte."""
    monkeypatch.setattr("proxy.observation.logs.time.time", lambda: 1_764_230_400.123456)
    fast, chain = io.StringIO(), io.StringIO()
    make_logger(fast).info("request", **fields)
    _chain_logger(chain).info("request", **fields)
    assert fast.getvalue() == chain.getvalue()
    assert json.loads(fast.getvalue())["timestamp"] == "2025-11-27T08:00:00.123456Z"


def test_bound_context_arguments_and_exceptions_take_the_chain() -> None:
    """What the fast path does not handle still goes through the chain, as before."""
    out = io.StringIO()
    log = make_logger(out)
    log.bind(worker=2).info("bound", code="x")
    log.info("pid %s", 7)
    try:
        raise ValueError("boom")
    except ValueError:
        log.info("failed", exc_info=True)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0]["worker"] == 2
    assert lines[0]["code"] == "x"
    assert lines[1]["event"] == "pid 7"
    assert lines[2]["exception"].startswith("ValueError: boom")
    assert all(line["level"] == "info" for line in lines)
