"""What an upstream may send: the caps on a response's head and on the body held for a reader."""

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

    @property
    def max_head(self) -> int:
        """Bytes of all of one response's heads together (1xx ones included)."""
        return self.max_line_size + self.max_headers * (self.max_field_size + 4)
