"""The agent's request body, kept as it passes so that a retry can send it again.

As Envoy buffers a request it may retry (up to ``per_request_buffer_limit_bytes``): each try reads
the body through ``KeptBody.send``, which yields what was kept first, then reads on from the agent
and keeps that too, up to ``cap`` bytes. A body over the cap, or whose reading failed, cannot be
sent again (``replayable``), and is streamed as it arrives as before. A try that stops reading
early (the upstream answered before taking the whole body) leaves the agent's stream where it
was: the next try reads on from there.
"""

from __future__ import annotations

from collections.abc import AsyncIterator


class KeptBody:
    """One request's body, for every try of it."""

    __slots__ = ("_broken", "_chunks", "_done", "_size", "_source", "cap")

    def __init__(self, source: AsyncIterator[bytes], cap: int) -> None:
        self._source = source
        self.cap = cap
        self._chunks: list[bytes] = []
        self._size = 0
        self._done = False  # the agent's stream has ended
        self._broken = False  # over the cap, or its reading failed: no try can send it whole

    @property
    def replayable(self) -> bool:
        """Whether another try can send the whole body."""
        return not self._broken

    async def send(self) -> AsyncIterator[bytes]:
        """The body for one try: what was kept, then the rest as it arrives (kept too)."""
        for chunk in self._chunks:
            yield chunk
        while not self._done:
            try:
                chunk = await anext(self._source)
            except StopAsyncIteration:
                self._done = True
                return
            except BaseException:
                self._broken = True  # the agent's stream is gone (a timeout, a cancelled try)
                raise
            self._size += len(chunk)
            if self._size <= self.cap:
                self._chunks.append(chunk)
            else:
                self._broken, self._chunks = True, []
            yield chunk
