"""The one truncation: a text cut to a length, its last character an ellipsis when it was cut."""

from __future__ import annotations

#: What replaces the cut-off end (one character, so ``limit`` is the length shown).
ELLIPSIS = "\u2026"


def shortened(text: str, limit: int, *, tidy: bool = False) -> str:
    """``text`` when it has at most ``limit`` characters, else its first ``limit - 1`` and ``…``
    (with ``tidy``, the spaces before the ``…`` dropped: a sentence cut between two words)."""
    if len(text) <= limit:
        return text
    kept = text[: limit - 1]
    return (kept.rstrip() if tidy else kept) + ELLIPSIS
