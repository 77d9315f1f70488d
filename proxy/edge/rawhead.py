"""Header bytes that are not UTF-8, written back as they came, in both directions.

aiohttp's parsers keep a header byte that is not valid UTF-8 (latin-1 ``caf\\xe9``,
``filename=r\\xe9sum\\xe9.pdf``) as a surrogate escape, and its header writer drops surrogates:
through mend such bytes vanished. A head with such a value is serialised here with
``surrogateescape``, which restores the bytes exactly; an all-ASCII head (nearly every one) takes
aiohttp's own writer unchanged, at the cost of one ``isascii()`` per header value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from aiohttp import client_reqrep
from aiohttp.http_writer import StreamWriter
from multidict import CIMultiDict

#: Bytes no header line may hold (aiohttp's own writer refuses them too: header injection).
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def is_ascii(headers: Mapping[str, str]) -> bool:
    return all(value.isascii() for value in headers.values())


def head_bytes(status_line: str, headers: Mapping[str, str]) -> bytes:
    """``status_line`` and ``headers`` as HTTP/1.1 head bytes, surrogate escapes restored."""
    lines = [status_line, *(f"{name}: {value}" for name, value in headers.items())]
    if any(_CONTROL.search(line) for line in lines):
        raise ValueError("control character in a header line")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape")


class VerbatimHeadWriter(StreamWriter):
    """aiohttp's writer, except that a head with non-UTF-8 bytes is written byte for byte."""

    async def write_headers(self, status_line: str, headers: CIMultiDict[str]) -> None:
        await super().write_headers(status_line, headers)
        if not is_ascii(headers):
            self._headers_buf = head_bytes(status_line, headers)


def install_for_clients() -> None:
    """Make aiohttp's client write request heads with ``VerbatimHeadWriter``.

    aiohttp builds the writer inside ``ClientRequest.send`` from its module's ``StreamWriter``
    and offers no hook; the subclass behaves exactly like it for ASCII heads, so setting it once
    per process changes nothing else. Idempotent.
    """
    setattr(client_reqrep, "StreamWriter", VerbatimHeadWriter)  # noqa: B010 - not exported
