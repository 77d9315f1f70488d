"""Server-sent events, rewritten one event at a time as they arrive (never the stream whole).

``EventRewriter.feed`` takes the bytes of a ``text/event-stream`` body as they come and returns the
bytes to send now: every complete event, unchanged unless ``rewrite`` replaces it. The bytes of an
event still arriving wait for its end (a blank line, as an SSE client dispatches it), and no
longer: an event passes the moment its last line does. An event growing past ``max_event_bytes``
is let through unchanged from then on, so the buffer never holds more than that.

Lines end with CRLF, LF or CR (WHATWG HTML, "Parsing an event stream"); a CR at the end of what has
arrived waits for the next byte, which may make it a CRLF.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

#: An event bigger than this passes through unchanged (and unread).
MAX_EVENT_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class Event:
    """One complete event: its fields as a client reads them, and its bytes as they came."""

    raw: bytes
    event: str
    data: str
    #: the line ending the event used (``\n``, ``\r\n`` or ``\r``), for a rewritten event
    newline: bytes

    def with_data(self, data: str) -> bytes:
        """This event's bytes with its data replaced: other fields and comments are kept in
        place, the data lines become one ``data:`` line where the first one was."""
        out: list[bytes] = []
        written = False
        for line in _lines(self.raw):
            name = line.split(b":", 1)[0]
            if name == b"data":
                if not written:
                    out.append(b"data: " + data.encode("utf-8"))
                    written = True
                continue
            out.append(line)
        if not written:
            out.append(b"data: " + data.encode("utf-8"))
        return self.newline.join(out) + self.newline + self.newline


def _lines(raw: bytes) -> list[bytes]:
    """The lines of one event (its final blank line dropped), whatever their line ends."""
    text = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return text.split(b"\n")[:-2] if text.endswith(b"\n\n") else text.split(b"\n")


def parse_event(raw: bytes) -> Event:
    """The ``event`` and ``data`` fields of one complete event's bytes."""
    newline = b"\r\n" if b"\r\n" in raw else b"\r" if b"\n" not in raw else b"\n"
    kind = ""
    data: list[str] = []
    for line in _lines(raw):
        if not line or line.startswith(b":"):
            continue
        name, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            data.append(value.decode("utf-8", "replace"))
        elif name == b"event":
            kind = value.decode("utf-8", "replace")
    return Event(raw, kind, "\n".join(data), newline)


#: an event's replacement (``None``: keep it); a coroutine, since the cross-call view it writes
#: into an error's envelope asks the state store
Rewrite = Callable[[Event], Awaitable[bytes | None]]


class EventRewriter:
    """Feeds a stream through ``rewrite`` one complete event at a time.

    ``wants`` is a cheap look at an event's raw bytes (no parse): only events it accepts are
    parsed and offered to ``rewrite``, which returns the replacement bytes or ``None`` to keep the
    event as it came.
    """

    def __init__(
        self,
        rewrite: Rewrite,
        wants: Callable[[bytes], bool],
        max_event_bytes: int = MAX_EVENT_BYTES,
    ) -> None:
        self._rewrite = rewrite
        self._wants = wants
        self._max = max_event_bytes
        self._buf = bytearray()
        self._scanned = 0  # bytes of the current event already searched for its end
        self._passing = False  # the current event outgrew the cap: let it through as it comes
        self._mid_line = False  # (passing) what was let through ends inside a line
        self._after_cr = False  # (passing) what was let through ends with a CR
        self.rewritten = 0

    async def feed(self, chunk: bytes) -> bytes:
        """The bytes to send now, given ``chunk`` (may be empty)."""
        out = bytearray()
        self._buf += chunk
        while self._buf:
            end = self._event_end()
            if self._passing:
                cut = len(self._buf) if end is None else end
                passed = bytes(self._buf[:cut])
                out += passed
                del self._buf[:cut]
                self._scanned = 0
                if end is None:  # the event goes on past what has arrived
                    self._mid_line = not passed.endswith((b"\n", b"\r"))
                    self._after_cr = passed.endswith(b"\r")
                    break
                self._passing = self._mid_line = self._after_cr = False
                continue
            if end is None:
                if len(self._buf) > self._max:
                    self._passing = True
                    continue
                break
            raw = bytes(self._buf[:end])
            del self._buf[:end]
            self._scanned = 0
            out += await self._event(raw)
        return bytes(out)

    def close(self) -> bytes:
        """What is left when the stream ends (an unfinished event, as it came)."""
        rest = bytes(self._buf)
        self._buf.clear()
        return rest

    async def _event(self, raw: bytes) -> bytes:
        if not self._wants(raw):
            return raw
        replaced = await self._rewrite(parse_event(raw))
        if replaced is None:
            return raw
        self.rewritten += 1
        return replaced

    def _event_end(self) -> int | None:
        """The offset just past the blank line that ends the first event in the buffer."""
        buf = self._buf
        size = len(buf)
        pos = self._scanned
        if pos == 0 and self._after_cr and buf[:1] == b"\n":
            pos = 1  # the LF of a CRLF whose CR was already let through
        # -1: the buffer starts inside a line whose start was already let through
        line_start = -1 if pos == 0 and self._mid_line else pos
        while pos < size:
            lf = buf.find(b"\n", pos)
            cr = buf.find(b"\r", pos, lf if lf >= 0 else size)
            if cr < 0 and lf < 0:
                break
            if cr >= 0:
                if cr + 1 == size:  # a CR last: a CRLF may be arriving
                    break
                stop = cr + 2 if buf[cr + 1] == 0x0A else cr + 1
                at = cr
            else:
                stop, at = lf + 1, lf
            if at == line_start:  # an empty line: the event ends here
                return stop
            pos = line_start = stop
        self._scanned = max(line_start, 0)
        return None
