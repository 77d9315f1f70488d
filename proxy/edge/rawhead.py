"""Header bytes that are not UTF-8, written back to the agent as they came.

aiohttp's parser keeps a header byte that is not valid UTF-8 (latin-1 ``caf\\xe9``,
``filename=r\\xe9sum\\xe9.pdf``) as a surrogate escape, and its header writer drops surrogates:
through mend such bytes vanished. A head with such a value is serialised here with
``surrogateescape``, which restores the bytes exactly; an all-ASCII head (nearly every one) takes
aiohttp's own writer unchanged, at the cost of one ``isascii()`` per header value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from multidict import CIMultiDict, CIMultiDictProxy

#: Bytes no header line may hold (aiohttp's own writer refuses them too: header injection).
CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def decoded(raw: list[tuple[bytes, bytes]]) -> CIMultiDictProxy[str]:
    """Header fields as llhttp hands them over, decoded as aiohttp's parser does: bytes that are
    not UTF-8 become surrogate escapes, which ``head_bytes`` writes back as they came."""
    return CIMultiDictProxy(
        CIMultiDict(
            [
                (name.decode("utf-8", "surrogateescape"), value.decode("utf-8", "surrogateescape"))
                for name, value in raw
            ]
        )
    )


def is_ascii(headers: Mapping[str, str]) -> bool:
    return all(value.isascii() for value in headers.values())


def head_bytes(status_line: str, headers: Mapping[str, str]) -> bytes:
    """``status_line`` and ``headers`` as HTTP/1.1 head bytes, surrogate escapes restored."""
    lines = [status_line, *(f"{name}: {value}" for name, value in headers.items())]
    if any(CONTROL.search(line) for line in lines):
        raise ValueError("control character in a header line")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape")
