"""Reading an upstream error body: capped, decompressed with a cap, decoded, parsed.

An error body is read to be understood, never forwarded as is, so it is buffered; a hostile or
broken upstream must not be able to make that cost more than the caps: the wire bytes read stop at
``max_bytes`` and a decompression bomb stops at ``max_decompressed``. A document nested deeper
than ``json_depth.MAX_JSON_DEPTH`` is read as text, never parsed.
"""

from __future__ import annotations

import codecs
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import brotli

from proxy.policy import json_depth
from proxy.policy.exchange import NOT_JSON

_CHUNK = 16 << 10


@dataclass(frozen=True, slots=True)
class Body:
    text: str
    json: Any
    truncated: bool


def _zlib_inflate(data: bytes, limit: int, wbits: int) -> tuple[bytes, bool]:
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(data, limit)
    except zlib.error:
        if wbits == zlib.MAX_WBITS:  # "deflate" is raw deflate for some servers
            return _zlib_inflate(data, limit, -zlib.MAX_WBITS)
        raise
    return out, bool(inflater.unconsumed_tail)


def _brotli_inflate(data: bytes, limit: int) -> tuple[bytes, bool]:
    decoder = brotli.Decompressor()
    out = bytearray()
    for start in range(0, len(data), _CHUNK):
        out += decoder.process(
            data[start : start + _CHUNK], output_buffer_limit=limit - len(out) + 1
        )
        if len(out) > limit:
            return bytes(out[:limit]), True
    return bytes(out), False


_DECODERS: dict[str, Callable[[bytes, int], tuple[bytes, bool]]] = {
    "gzip": lambda d, n: _zlib_inflate(d, n, zlib.MAX_WBITS | 16),
    "x-gzip": lambda d, n: _zlib_inflate(d, n, zlib.MAX_WBITS | 16),
    "deflate": lambda d, n: _zlib_inflate(d, n, zlib.MAX_WBITS),
    "br": _brotli_inflate,
}


def decompress(data: bytes, encoding: str, limit: int) -> tuple[bytes, bool]:
    """Undo ``Content-Encoding`` (possibly a list, applied in order); a broken stream yields b""."""
    truncated = False
    for coding in reversed([c.strip().lower() for c in encoding.split(",") if c.strip()]):
        if coding == "identity":
            continue
        decoder = _DECODERS.get(coding)
        if decoder is None:
            return b"", True
        try:
            data, cut = decoder(data, limit)
        except (zlib.error, brotli.error):
            return b"", True
        truncated = truncated or cut
    return data, truncated


def _charset(content_type_params: str | None) -> str:
    if content_type_params:
        try:
            return codecs.lookup(content_type_params).name
        except LookupError:
            pass
    return "utf-8"


def parse(data: bytes, *, encoding: str, charset: str | None, limit: int, cut: bool) -> Body:
    if encoding:
        data, truncated = decompress(data, encoding, limit)
        cut = cut or truncated
    text = data.decode(_charset(charset), errors="replace")
    document: Any = NOT_JSON
    stripped = text.lstrip()[:1]
    if stripped in ("{", "[") and not cut:
        # nested deeper than MAX_JSON_DEPTH: read as text, like any body that is not JSON
        document = json_depth.loads(data if _charset(charset) == "utf-8" else text)
    return Body(text=text, json=document, truncated=cut)
