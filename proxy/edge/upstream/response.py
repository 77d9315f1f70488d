"""An upstream's response: its final head, and its body read as it arrives (with backpressure)."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp.helpers import parse_content_type
from multidict import CIMultiDictProxy

from proxy.edge.upstream.connection import Connection
from proxy.edge.upstream.errors import ReadTimeout


class Response:
    """The head is whole when this exists; the body is read with ``read``, ``chunks`` or
    ``read_nowait``. ``release`` gives the connection back to its pool when both messages are
    whole and the upstream keeps it open, and closes it otherwise; ``close`` always closes it.

    The names mirror ``aiohttp.ClientResponse``'s where they mean the same (``status``,
    ``reason``, ``headers``, ``content_type``, ``charset``, ``content_length``).
    """

    __slots__ = (
        "_content",
        "_done",
        "connection",
        "content_length",
        "headers",
        "raw_headers",
        "reason",
        "status",
        "version",
    )

    def __init__(self, connection: Connection, done: Callable[[Connection, bool], None]) -> None:
        self.connection = connection
        self._done: Callable[[Connection, bool], None] | None = done
        self.status = connection.status
        self.reason = connection.reason.decode("utf-8", "surrogateescape")
        self.version = connection.version
        self.raw_headers = tuple(connection.raw)
        self.headers: CIMultiDictProxy[str] = connection.headers()
        length = self.headers.get("Content-Length")
        # llhttp accepted it: digits only, one value
        self.content_length = None if length is None else int(length)
        self._content: tuple[str, dict[str, str]] | None = None

    # --- the head -------------------------------------------------------------------------------

    def _parsed_type(self) -> tuple[str, dict[str, str]]:
        if self._content is None:
            raw = self.headers.get("Content-Type")
            if raw is None:
                self._content = ("application/octet-stream", {})
            elif ";" not in raw and raw.count("/") == 1 and " " not in raw.strip():
                self._content = (raw.strip().lower(), {})  # most: "application/json"
            else:  # parameters: parsed exactly as aiohttp did
                kind, params = parse_content_type(raw)
                self._content = (kind, dict(params))
        return self._content

    @property
    def content_type(self) -> str:
        return self._parsed_type()[0]

    @property
    def charset(self) -> str | None:
        return self._parsed_type()[1].get("charset")

    # --- the body -------------------------------------------------------------------------------

    def idle(self, seconds: float | None) -> None:
        """From now on the upstream may pause ``seconds`` between body bytes (the route's
        ``idle_timeout`` once streaming; ``read_timeout`` until then)."""
        self.connection.read_timeout = seconds

    def at_eof(self) -> bool:
        """Whether the whole body has been read."""
        connection = self.connection
        return connection.body_done and not connection.buffer

    def read_nowait(self) -> bytes:
        """What arrived of the body and was not read yet, without waiting."""
        return self._take(-1)

    async def read(self, limit: int = -1) -> bytes:
        """The next bytes of the body (at most ``limit`` if not negative); ``b""`` at its end."""
        connection = self.connection
        while not connection.buffer:
            if connection.body_done:
                return b""
            await self._wait()
        return self._take(limit)

    def _take(self, limit: int) -> bytes:
        """Up to ``limit`` (all if negative) of the body bytes held; the socket is read again
        once what is held is down to the low-water mark."""
        connection = self.connection
        buffer = connection.buffer
        if not buffer:
            if connection.error is not None:
                raise connection.error
            return b""
        if len(buffer) == 1 and (limit < 0 or len(buffer[0]) <= limit):
            data = buffer.popleft()
        else:
            data = b"".join(buffer)
            buffer.clear()
            if 0 <= limit < len(data):
                buffer.append(data[limit:])
                data = data[:limit]
        connection.buffered -= len(data)
        if connection.paused and connection.buffered <= connection.limits.low_water:
            connection.paused = False
            connection.resume_reading()
        return data

    async def _wait(self) -> None:
        """Until body bytes are held, the body ended, or it failed; at most the read timeout
        (``ReadTimeout``, and the connection is aborted)."""
        connection = self.connection
        if connection.error is not None:
            raise connection.error
        loop = connection.loop
        connection.waiter = waiter = loop.create_future()
        timer = None
        if (seconds := connection.read_timeout) is not None:
            timer = loop.call_later(seconds, _timed_out, connection, seconds)
        try:
            await waiter
        finally:
            connection.waiter = None
            if timer is not None:
                timer.cancel()

    # --- the connection -------------------------------------------------------------------------

    def release(self) -> None:
        """Done with this response: the connection goes back to its pool if it can be reused,
        else it is closed. Idempotent."""
        done, self._done = self._done, None
        if done is not None:
            done(self.connection, self.connection.reusable)

    def close(self) -> None:
        """Done with this response and its connection, which is closed. Idempotent."""
        done, self._done = self._done, None
        if done is not None:
            done(self.connection, False)


def _timed_out(connection: Connection, seconds: float) -> None:
    """The read timeout fired: the wait ends in ``ReadTimeout`` (made only now, not for every
    wait that ends in time)."""
    connection.fail(ReadTimeout(f"no body bytes from the upstream for {seconds:g} s"))
