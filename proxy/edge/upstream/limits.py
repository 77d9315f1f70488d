"""What an upstream may send, and what a pool keeps: the caps on a response's head, on the body
held for a reader, and on the idle connections kept for the next request."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limits:
    """What an upstream may send (the first three are aiohttp's client defaults, kept)."""

    max_line_size: int = 8190  # the status line
    max_field_size: int = 8190  # a header name or value
    max_headers: int = 128
    max_interim: int = 8  # interim (1xx) responses before the final head
    high_water: int = 256 << 10  # body bytes held before the socket stops being read
    low_water: int = 64 << 10  # ... and read again
    max_idle: int = 256  # idle keep-alive connections a pool keeps
    keepalive_s: float = 15.0  # ... each for at most this long (aiohttp's 15 s)

    @property
    def max_head(self) -> int:
        """Bytes of all of one response's heads together (1xx ones included)."""
        return self.max_line_size + self.max_headers * (self.max_field_size + 4)
