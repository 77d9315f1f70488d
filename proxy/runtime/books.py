"""The operator's books of one process: the unexplained shapes and the recent failures (issue 40).

The envelope steps write them (``proxy/runtime/unexplained.py``, ``proxy/runtime/failures.py``)
and the admin port reads them (``proxy/runtime/cockpit.py``). With ``--workers``, the admin port
is the supervisor's, which sees no request: each worker writes its books whole to
``books-<pid>.json`` in the directory it shares with its supervisor (the metrics' directory), at
most once a second and only after a change, written then renamed so a reader never sees half;
the supervisor merges the files it finds (``read_books``). With ``state: redis://``, replicas
share their books through the store (``proxy/runtime/shared_books.py``): ``remote`` holds the
others' as last read, and a worker's file carries them to its supervisor.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from proxy.observation.recent import RecentFailures
from proxy.observation.shapes import ShapeBook

#: seconds between two writes of a worker's books
WRITE_INTERVAL_S = 1.0


def books_file(directory: Path, pid: int | None = None) -> Path:
    """Where a worker writes its books in the supervisor's shared directory."""
    return directory / f"books-{os.getpid() if pid is None else pid}.json"


@dataclass
class Books:
    """This process's books, and where a worker writes them (``None``: nowhere)."""

    shapes: ShapeBook = field(default_factory=ShapeBook)
    recent: RecentFailures = field(default_factory=RecentFailures)
    file: Path | None = None
    #: this process among the replicas, and the others' books by replica (``shared_books``)
    replica: str = ""
    remote: Callable[[], dict[str, dict[str, Any]]] = dict
    #: counts changes, so that a writer knows whether it has something new
    version: int = 0
    _writing: asyncio.TimerHandle | None = None

    def changed(self) -> None:
        """A book changed: a worker writes them out within ``WRITE_INTERVAL_S``."""
        self.version += 1
        if self.file is not None and self._writing is None:
            self._writing = asyncio.get_running_loop().call_later(WRITE_INTERVAL_S, self.write)

    def own(self) -> dict[str, Any]:
        """This process's books, as the store and a supervisor read them."""
        return {"shapes": self.shapes.dump(), "recent": self.recent.dump()}

    def dump(self) -> dict[str, Any]:
        """What a worker writes: its own books, its name and the other replicas' books."""
        return {**self.own(), "replica": self.replica, "remote": self.remote()}

    def write(self) -> None:
        self._writing = None
        if self.file is None:
            return
        partial = self.file.with_suffix(".tmp")
        try:
            partial.write_bytes(orjson.dumps(self.dump()))
            partial.replace(self.file)
        except OSError:
            return  # the directory went away (shutting down); the next change writes again


def read_books(directory: Path) -> Iterator[dict[str, Any]]:
    """Every worker's books found in ``directory``; a file being replaced, or from a worker
    gone with its directory, is skipped."""
    for path in sorted(directory.glob("books-*.json")):
        try:
            data = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        if isinstance(data, dict):
            yield data
