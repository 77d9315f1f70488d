"""Every log line is one JSON object: aiohttp's and asyncio's stdlib records included."""

from __future__ import annotations

import asyncio
import errno
import io
import json
import logging
import socket
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from proxy.observation.logs import exception_line, make_logger
from proxy.observation.stdlib_logs import StdlibHandler, route_stdlib_logging

ROUTED = ("", "aiohttp", "asyncio")


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


Route = Callable[..., tuple[StdlibHandler, io.StringIO]]


@pytest.fixture
def route() -> Iterator[Route]:
    """``route_stdlib_logging`` into a fresh buffer; the stdlib loggers are restored after."""
    loggers = [logging.getLogger(name or None) for name in ROUTED]
    saved = [(lg.handlers[:], lg.propagate) for lg in loggers]

    def install(clock: Callable[[], float] | None = None, interval: float = 10.0) -> Any:
        out = io.StringIO()
        log = make_logger(out)
        handler = route_stdlib_logging(log, interval=interval, clock=clock or Clock())
        return handler, out

    yield install
    for lg, (handlers, propagate) in zip(loggers, saved, strict=True):
        lg.handlers[:] = handlers
        lg.propagate = propagate


def lines(out: io.StringIO) -> list[dict[str, Any]]:
    text = out.getvalue()
    assert text.endswith("\n") or not text
    return [json.loads(line) for line in text.splitlines()]


def boom() -> None:
    raise ValueError("bad\nrequest line")


def test_an_aiohttp_exception_record_is_one_json_line(route: Route) -> None:
    """``aiohttp.server``'s "Error handling request" and its traceback: one line, one object."""
    _, out = route()
    try:
        boom()
    except ValueError:
        logging.getLogger("aiohttp.server").exception("Error handling request")
    assert out.getvalue().count("\n") == 1
    [line] = lines(out)
    assert (line["event"], line["level"], line["logger"]) == (
        "Error handling request",
        "error",
        "aiohttp.server",
    )
    assert line["exception"].startswith("ValueError: bad request line | at ")
    assert "test_stdlib_logs.py:" in line["exception"]
    assert "boom" in line["exception"]
    assert "\n" not in line["exception"]


async def test_a_malformed_request_to_aiohttp_is_logged_as_one_json_line(
    route: Route, aiohttp_server: Callable[..., Awaitable[TestServer]]
) -> None:
    """A request aiohttp cannot parse: its "Error handling request" is one JSON line, counted."""
    handler, out = route()
    server = await aiohttp_server(web.Application())
    for _ in range(3):
        reader, writer = await asyncio.open_connection(server.host, server.port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n")
        assert (await reader.readline()).split()[1] == b"400"
        writer.close()
        await writer.wait_closed()
    handler.flush()
    first, counted = lines(out)
    assert first["event"] == "Error handling request from 127.0.0.1"
    assert first["logger"] == "aiohttp.server"
    assert first["exception"].startswith("aiohttp.http_exceptions.")
    assert counted["repeated"] == 2


def test_a_thousand_identical_records_are_one_line_and_a_count(route: Route) -> None:
    """1,000 identical records inside the interval: the first, then one line saying 999 more."""
    handler, out = route(Clock())
    server = logging.getLogger("aiohttp.server")
    for _ in range(1_000):
        server.error("Error handling request")
    handler.flush()
    written = lines(out)
    assert len(written) <= 2
    assert "repeated" not in written[0]
    assert written[-1]["repeated"] == 999
    assert {line["event"] for line in written} == {"Error handling request"}


def test_a_storm_is_written_once_per_interval_with_its_count(route: Route) -> None:
    """Once per interval the record is written again, with how many were counted since."""
    clock = Clock()
    _, out = route(clock)
    server = logging.getLogger("aiohttp.server")
    for second in range(25):
        clock.now = 1_000.0 + second
        for _ in range(100):
            server.error("Error handling request")
    assert [line.get("repeated", 0) for line in lines(out)] == [0, 999, 999]


def test_a_count_nothing_followed_is_written_when_its_interval_is_over(route: Route) -> None:
    """A storm that stopped still has its count written, by the next record of any kind."""
    clock = Clock()
    _, out = route(clock)
    for _ in range(10):
        logging.getLogger("asyncio").error("socket.accept() out of system resource")
    clock.now += 11.0
    logging.getLogger("aiohttp.web").warning("something else")
    assert [(line["event"], line.get("repeated")) for line in lines(out)] == [
        ("socket.accept() out of system resource", None),
        ("socket.accept() out of system resource", 9),
        ("something else", None),
    ]


def test_records_differing_only_in_their_arguments_are_one_record(route: Route) -> None:
    """A peer cannot dodge the limit by varying what it sends: the template is what counts."""
    handler, out = route()
    for n in range(50):
        logging.getLogger("aiohttp.server").error("Error handling request from %s", f"10.0.0.{n}")
    handler.flush()
    written = lines(out)
    assert written[0]["event"] == "Error handling request from 10.0.0.0"
    assert written[-1]["repeated"] == 49


def test_socket_accept_out_of_resources_is_logged_once_with_a_count(route: Route) -> None:
    """At the descriptor limit asyncio reports every failed accept; the log shows one, counted."""
    handler, out = route()
    loop = asyncio.new_event_loop()
    try:
        with socket.socket() as sock:
            for _ in range(1_000):
                loop.call_exception_handler(
                    {
                        "message": "socket.accept() out of system resource",
                        "exception": OSError(errno.EMFILE, "Too many open files"),
                        "socket": sock,
                    }
                )
    finally:
        loop.close()
    handler.flush()
    first, counted = lines(out)
    assert first["event"].startswith("socket.accept() out of system resource")
    assert (first["logger"], first["level"]) == ("asyncio", "error")
    assert first["exception"] == "OSError: [Errno 24] Too many open files"
    assert counted["repeated"] == 999


def test_routing_twice_installs_one_handler(route: Route) -> None:
    """Idempotent: after two calls each routed logger has one mend handler; no line twice."""
    route()
    _, out = route()
    for name in ROUTED:
        handlers = logging.getLogger(name or None).handlers
        assert sum(isinstance(h, StdlibHandler) for h in handlers) == 1
    logging.getLogger("aiohttp.web").warning("once")
    assert [line["event"] for line in lines(out)] == ["once"]


def test_aiohttp_records_reach_no_plain_text_handler(route: Route) -> None:
    """A plain handler someone put on the root sees no aiohttp record: they are only JSON."""
    plain = io.StringIO()
    logging.getLogger().addHandler(logging.StreamHandler(plain))
    _, out = route()
    logging.getLogger("aiohttp.client").error("connection lost")
    assert plain.getvalue() == ""
    assert [line["event"] for line in lines(out)] == ["connection lost"]


def test_any_library_reaching_the_root_is_a_json_line(route: Route) -> None:
    """Loggers other than aiohttp's and asyncio's propagate to the root handler."""
    _, out = route()
    logging.getLogger("some.library").warning("careful: %d left", 3)
    [line] = lines(out)
    assert (line["event"], line["logger"], line["level"]) == (
        "careful: 3 left",
        "some.library",
        "warning",
    )


def test_a_multi_line_message_with_bad_arguments_is_still_one_line(route: Route) -> None:
    """A message whose arguments do not fit its format is written as its template, flattened."""
    _, out = route()
    logging.getLogger("aiohttp.web").error("first\nsecond %d", "not a number")
    [line] = lines(out)
    assert line["event"] == "first second %d"


def test_a_recursion_error_is_a_short_line_naming_the_innermost_frames() -> None:
    """A RecursionError's thousand frames become a bounded line ending where it failed."""

    def down(n: int) -> int:
        return down(n + 1) + 1

    try:
        down(0)
    except RecursionError as exc:
        text = exception_line(exc)
    assert text.startswith("RecursionError: maximum recursion depth exceeded | at … > ")
    assert text.count(" > ") == 8
    assert len(text) < 1_000


def test_a_cause_is_named_after_the_exception() -> None:
    """``raise ... from`` keeps what caused it, on the same line."""
    try:
        try:
            boom()
        except ValueError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as exc:
        text = exception_line(exc)
    assert text.startswith("RuntimeError: wrapped | at ")
    assert text.endswith("| from ValueError: bad request line")


def test_mends_own_exception_lines_carry_the_exception_too() -> None:
    """``log.exception`` on mend's logger writes an ``exception`` field, not ``exc_info: true``."""
    out = io.StringIO()
    log = make_logger(out)
    try:
        boom()
    except ValueError:
        log.exception("mend_bug", error="ValueError")
    [line] = lines(out)
    assert "exc_info" not in line
    assert line["exception"].startswith("ValueError: bad request line | at ")
    assert sys.exc_info() == (None, None, None)
