"""Operator files read with a size cap: rule, detector and config files (OpenAPI may reuse it).

A file over the cap is refused before a byte of it is read (its size from ``stat``), and at most
``limit + 1`` bytes are ever read, so a file growing while it is read is caught too. The refusal
is an ``OSError``, which every loader already reports as one ``file:1: cannot read: ...`` line.
A 100 MB rule file took 31-84 s and 200 MB of RSS to reload before the cap.
"""

from __future__ import annotations

from pathlib import Path

#: The default cap (the ``max_file_bytes`` setting): the largest shipped pack is under 100 KiB.
MAX_FILE_BYTES = 8 << 20


class FileTooLarge(OSError):
    """An operator file over ``max_file_bytes``."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"{size:,} bytes, more than max_file_bytes ({limit:,}): refused")


def read_bytes(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The file's bytes; ``FileTooLarge`` when it has more than ``limit``."""
    size = path.stat().st_size
    if size > limit:
        raise FileTooLarge(size, limit)
    with path.open("rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise FileTooLarge(len(data), limit)
    return data


def read_text(path: Path, limit: int = MAX_FILE_BYTES) -> str:
    """The file's UTF-8 text (``UnicodeDecodeError`` when it is not), at most ``limit`` bytes."""
    return read_bytes(path, limit).decode("utf-8")
