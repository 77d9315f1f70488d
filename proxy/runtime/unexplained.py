"""The envelope step that keeps what only a built-in fallback explained (issue 40).

After a match, an answer whose envelope came from a ``fallback.*`` rule is counted into the
``ShapeBook`` by its shape, with a sample masked as the log line masks bodies. Nothing else is
kept, and nothing unmasked. With ``--workers``, the book is written to ``shapes-<pid>.json`` in
the directory the supervisor shares with its workers, at most once a second, for the admin port
to merge (``proxy/runtime/admin_shapes.py``).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from proxy.observation.shapes import ShapeBook, kept_headers, shape_of
from proxy.policy.evaluate import Answer
from proxy.policy.exchange import NOT_JSON, Exchange

if TYPE_CHECKING:
    from proxy.runtime.flow import Flow

#: the rules that explain an answer no pack knew
FALLBACK_PREFIX = "fallback."
#: seconds between two writes of a worker's book
SPILL_INTERVAL_S = 1.0


def spill_file(directory: Path, pid: int | None = None) -> Path:
    """Where a worker writes its book in the supervisor's shared directory."""
    return directory / f"shapes-{os.getpid() if pid is None else pid}.json"


class Unexplained:
    """An envelope step: counts fallback-explained answers into ``book``; the answer as it was."""

    def __init__(self, book: ShapeBook, spill: Path | None = None) -> None:
        self.book = book
        self.spill = spill
        self._spilling: asyncio.TimerHandle | None = None

    def __call__(self, flow: Flow, exchange: Exchange, answer: Answer) -> Answer:
        rules = [e.match.rule.id for e in answer.evaluations]
        fallback = next((r for r in rules if r.startswith(FALLBACK_PREFIX)), None)
        if fallback is None or exchange.status is None or flow.failure is not None:
            return answer
        is_json = exchange.json is not NOT_JSON
        shape = shape_of(
            exchange.route,
            exchange.status,
            exchange.content_type,
            exchange.json,
            exchange.text,
            is_json=is_json,
        )
        mask = flow.redactor().mask
        limit = self.book.limits.sample_chars
        headers = {k: mask(v).text for k, v in kept_headers(exchange.headers.items()).items()}
        self.book.record(
            shape,
            rule=fallback,
            sample=mask(exchange.text[:limit]).text,
            headers=headers,
            method=exchange.method,
            path=mask(exchange.path[:200]).text,
        )
        if self.spill is not None and self._spilling is None:
            self._spilling = asyncio.get_running_loop().call_later(SPILL_INTERVAL_S, self._write)
        return answer

    def _write(self) -> None:
        """The book to the worker's file, written whole then renamed (a reader never sees half)."""
        self._spilling = None
        assert self.spill is not None
        partial = self.spill.with_suffix(".tmp")
        try:
            partial.write_bytes(orjson.dumps(self.book.dump()))
            partial.replace(self.spill)
        except OSError:
            return  # the directory went away (shutting down); the next error writes again
