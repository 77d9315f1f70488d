"""KeptBody: a request body every try can send whole, within its cap (proxy/edge/kept_body.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from proxy.edge.kept_body import KeptBody


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        await asyncio.sleep(0)
        yield part


async def _read(body: AsyncIterator[bytes], stop_after: int | None = None) -> bytes:
    out = b""
    async for chunk in body:
        out += chunk
        if stop_after is not None and len(out) >= stop_after:
            break
    return out


def test_a_second_try_sends_the_same_bytes() -> None:
    """What the first try sent, the second sends again, byte for byte."""

    async def main() -> tuple[bytes, bytes, bool]:
        kept = KeptBody(_chunks(b"ab", b"cd", b"ef"), cap=100)
        first = await _read(kept.send())
        return first, await _read(kept.send()), kept.replayable

    assert asyncio.run(main()) == (b"abcdef", b"abcdef", True)


def test_a_try_that_stopped_early_leaves_the_rest_for_the_next() -> None:
    """An upstream that answered before taking the whole body: the next try sends all of it."""

    async def main() -> tuple[bytes, bytes]:
        kept = KeptBody(_chunks(b"ab", b"cd", b"ef"), cap=100)
        first = await _read(kept.send(), stop_after=2)
        return first, await _read(kept.send())

    assert asyncio.run(main()) == (b"ab", b"abcdef")


def test_a_body_over_the_cap_streams_once_and_cannot_be_sent_again() -> None:
    """Past the cap nothing is kept: the body goes through whole, and no retry is possible."""

    async def main() -> tuple[bytes, bool]:
        kept = KeptBody(_chunks(b"abcd", b"efgh"), cap=5)
        return await _read(kept.send()), kept.replayable

    assert asyncio.run(main()) == (b"abcdefgh", False)


def test_a_body_whose_reading_failed_cannot_be_sent_again() -> None:
    """The agent's stream broke (a timeout, a cancelled try): no try can send it whole."""

    async def broken() -> AsyncIterator[bytes]:
        yield b"ab"
        raise TimeoutError

    async def main() -> bool:
        kept = KeptBody(broken(), cap=100)
        with pytest.raises(TimeoutError):
            await _read(kept.send())
        return kept.replayable

    assert asyncio.run(main()) is False
