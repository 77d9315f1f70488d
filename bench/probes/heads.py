"""Issue 43, ``/ok``: what reading one request head costs three ways (bench/README.md).

    valgrind --tool=callgrind bench/.venv-image/bin/python bench/probes/heads.py KIND N

``KIND`` is ``httptools`` (llhttp with callbacks that only store what they get), ``mend`` (mend's
edge: ``head.Reading``, then ``head.parsed``) or ``aiohttp`` (aiohttp's C ``HttpRequestParser``,
llhttp too, the message made in Cython). Run each with N = 1000 and 3000 and divide the
difference of the two totals by 2000: the instructions of one head, imports left out.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import httptools
from aiohttp._http_parser import HttpRequestParser  # type: ignore[import-not-found]
from aiohttp.base_protocol import BaseProtocol

from proxy.edge.server import head
from proxy.edge.server.limits import Limits

HEAD = (
    b"GET /ok HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: python-httpx/0.28\r\n"
    b"Accept: */*\r\nAccept-Encoding: gzip, deflate\r\nConnection: keep-alive\r\n\r\n"
)


class Storing:
    """llhttp's callbacks, storing what they are handed and no more."""

    def __init__(self) -> None:
        self.raw: list[tuple[bytes, bytes]] = []
        self.target = b""
        self.done = 0

    def on_message_begin(self) -> None:
        self.raw, self.target = [], b""

    def on_url(self, url: bytes) -> None:
        self.target += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.raw.append((name, value))

    def on_message_complete(self) -> None:
        self.done += 1


class Edge(Storing):
    """The callbacks as mend's connection makes them: bounded reading, then the message."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = head.Reading(Limits())
        self.parser: Any = None

    def on_message_begin(self) -> None:
        self.reading.begin()

    def on_url(self, url: bytes) -> None:
        self.reading.url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.reading.field(name, value)

    def on_headers_complete(self) -> None:
        parser = self.parser
        method = parser.get_method().decode("ascii", "replace")
        message, _ = head.parsed(
            method,
            parser.get_http_version(),
            self.reading.target,
            self.reading.raw,
            keep_alive=parser.should_keep_alive(),
            upgrade=parser.should_upgrade(),
        )
        message.headers.get("Host")


def llhttp(callbacks: Storing, n: int) -> None:
    parser = httptools.HttpRequestParser(callbacks)
    if isinstance(callbacks, Edge):
        callbacks.parser = parser
    for _ in range(n):
        parser.feed_data(HEAD)
        if not isinstance(callbacks, Edge):
            parser.get_method(), parser.get_http_version(), parser.should_keep_alive()
    assert callbacks.done == n


def aiohttp_c(n: int) -> None:
    loop = asyncio.new_event_loop()
    parser = HttpRequestParser(
        BaseProtocol(loop), loop, 2**16, max_line_size=8190, max_field_size=8190
    )
    done = 0
    for _ in range(n):
        messages, _, _ = parser.feed_data(HEAD)
        done += len(messages)
        messages[0][0].headers.get("Host")
    assert done == n


def main() -> None:
    kind, n = sys.argv[1], int(sys.argv[2])
    if kind == "aiohttp":
        aiohttp_c(n)
    else:
        llhttp(Edge() if kind == "mend" else Storing(), n)


if __name__ == "__main__":
    main()
