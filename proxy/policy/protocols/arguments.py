"""What the model sent in a tool call's arguments: the one an error names, and the values it wrote.

An MCP tool's error text often says which argument was wrong only by quoting its value ("No time
zone found with key Mars/Olympus", "Ref 'nope123' did not resolve") or by naming it ("Invalid time
format"). ``named`` finds that argument, so a plan can point at ``/timezone``; ``echoed`` lists the
values the model wrote, which redaction keeps readable (``proxy/policy/redaction/echo.py``). Both
read
only the top level of the arguments and bounded amounts of them: the arguments are agent input.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Values shorter than this would be "found" in any text by chance ("a", "1", "ok").
MIN_VALUE = 3
#: At most this many arguments are looked at, and a value is compared up to this length.
MAX_ARGUMENTS = 64
MAX_VALUE = 2048


def _scalars(arguments: Any) -> list[tuple[str, str]]:
    """(name, value as text) of the top-level string and number arguments, bounded."""
    if not isinstance(arguments, Mapping):
        return []
    out: list[tuple[str, str]] = []
    for name, value in list(arguments.items())[:MAX_ARGUMENTS]:
        if not isinstance(name, str) or isinstance(value, bool):
            continue
        if isinstance(value, str) and MIN_VALUE <= len(value) <= MAX_VALUE:
            out.append((name, value))
        elif isinstance(value, int | float) and len(text := str(value)) >= MIN_VALUE:
            out.append((name, text))
    return out


def _as_word(text: str, word: str) -> bool:
    """Whether ``word`` occurs in ``text`` with no letter, digit or ``_`` either side."""
    start = text.find(word)
    while start >= 0:
        end = start + len(word)
        before = text[start - 1] if start else " "
        after = text[end] if end < len(text) else " "
        if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
            return True
        start = text.find(word, start + 1)
    return False


def named(arguments: Any, text: str) -> tuple[str, Any] | None:
    """The argument ``text`` is about, and its value: the one whose value it quotes (the
    longest such), else the one whose name it uses as a word (``source_timezone`` also as
    "source timezone"); ``None`` when it names none."""
    if not isinstance(arguments, Mapping) or not text:
        return None
    quoted = [(name, value) for name, value in _scalars(arguments) if value in text]
    if quoted:
        name, _ = max(quoted, key=lambda pair: len(pair[1]))
        return name, arguments[name]
    lowered = text.lower()
    names = [n for n in list(arguments)[:MAX_ARGUMENTS] if isinstance(n, str) and len(n) >= 2]
    for name in sorted(names, key=len, reverse=True):
        spoken = name.lower()
        if _as_word(lowered, spoken) or (
            "_" in spoken and _as_word(lowered, spoken.replace("_", " "))
        ):
            return name, arguments[name]
    return None


def echoed(arguments: Any) -> tuple[str, ...]:
    """The text values the model wrote, longest first (so a value inside another is found
    after it)."""
    values = {value for _, value in _scalars(arguments) if not value.isdigit()}
    return tuple(sorted(values, key=len, reverse=True))
