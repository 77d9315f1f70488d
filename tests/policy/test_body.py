"""Error bodies: decompressed under a cap, decoded by charset, parsed when JSON."""

from __future__ import annotations

import gzip
import zlib

import brotli
import pytest

from proxy.policy.exchange import NOT_JSON
from proxy.policy.upstream_body import parse

LIMIT = 64 << 10


@pytest.mark.parametrize(
    ("encoding", "data"),
    [
        ("gzip", gzip.compress(b'{"a": 1}', mtime=0)),
        ("x-gzip", gzip.compress(b'{"a": 1}', mtime=0)),
        ("deflate", zlib.compress(b'{"a": 1}')),
        ("deflate", zlib.compress(b'{"a": 1}')[2:-4]),  # raw deflate, as some servers send
        ("br", brotli.compress(b'{"a": 1}')),
        ("identity", b'{"a": 1}'),
        ("", b'{"a": 1}'),
    ],
)
def test_decompresses_every_encoding(encoding: str, data: bytes) -> None:
    """Each Content-Encoding is undone before parsing."""
    body = parse(data, encoding=encoding, charset=None, limit=LIMIT, cut=False)
    assert body.json == {"a": 1}
    assert not body.truncated


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [("gzip", gzip.compress), ("deflate", zlib.compress), ("br", brotli.compress)],
)
def test_decompression_bomb_stops_at_the_cap(encoding: str, compress: object) -> None:
    """64 MiB of zeros compressed to a few KB expands only to the cap, marked truncated."""
    bomb = compress(b"0" * (64 << 20))  # type: ignore[operator]
    body = parse(bomb, encoding=encoding, charset=None, limit=LIMIT, cut=False)
    assert len(body.text) <= LIMIT
    assert body.truncated
    assert body.json is NOT_JSON


def test_broken_compressed_stream_gives_empty_text() -> None:
    """A corrupt gzip body is not an exception: the envelope still comes from the status."""
    body = parse(b"not gzip at all", encoding="gzip", charset=None, limit=LIMIT, cut=False)
    assert (body.text, body.truncated) == ("", True)


@pytest.mark.parametrize(
    ("data", "charset", "text"),
    [
        ("Größe ungültig".encode("latin-1"), "iso-8859-1", "Größe ungültig"),
        ("Größe".encode(), None, "Größe"),
        (b"bad \xff\xfe bytes", "utf-8", "bad \ufffd\ufffd bytes"),
        (b"x", "no-such-charset", "x"),
    ],
)
def test_decodes_by_charset_tolerating_bad_bytes(
    data: bytes, charset: str | None, text: str
) -> None:
    """The declared charset is used; invalid bytes become U+FFFD instead of failing."""
    assert parse(data, encoding="", charset=charset, limit=LIMIT, cut=False).text == text


def test_truncated_body_is_not_parsed_as_json() -> None:
    """A body cut at the cap is matched as text only: half a JSON document is not JSON."""
    body = parse(b'{"detail": "x"}', encoding="", charset=None, limit=LIMIT, cut=True)
    assert body.json is NOT_JSON
    assert body.truncated
