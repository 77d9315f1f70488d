"""Linear-time regular expressions for untrusted text (agent requests, upstream responses).

Python's ``re`` backtracks: a pattern with two quantifiers that can trade characters (``.*a.*b``)
takes seconds on a long hostile input, and stalls the event loop for every request meanwhile. RE2
runs in time linear in the input whatever the pattern, but has no lookarounds, backreferences or
possessive quantifiers, and from Python each call costs a few microseconds more than ``re``.

- ``Linear`` / ``linear``: an RE2 pattern, for text that is not length-capped and a pattern RE2
  can say exactly. Total on every ``str``: lone surrogates (header bytes aiohttp decoded with
  ``surrogateescape``) are read as U+FFFD where RE2's strict UTF-8 encoder would raise.
- ``gated`` / ``anchored`` (``gated.py``): an ``re`` pattern whose own quantifiers are bounded or
  possessive, behind an RE2 gate that skips it when it cannot match (redaction's patterns).
- ``TriggerSet``: which of several lists of literals occur in a text, in one RE2 pass.

``docs/design.md`` ("Regular expressions on untrusted text") lists every pattern mend runs on
agent or upstream text, with its engine and why it is safe.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol, cast

import re2

from proxy.config.re2compile import compile_re2, options

_SURROGATES = re.compile("[\ud800-\udfff]")


def encodable(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD: same length, so same offsets.

    RE2 reads UTF-8 and Python's strict encoder refuses surrogates. No pattern of ours names a
    surrogate, and U+FFFD falls in every class a surrogate does (``.``, ``[^/]``, ``\\W``), so a
    match is the same either way.
    """
    return _SURROGATES.sub("\ufffd", text)


class Match(Protocol):
    """What callers read from an RE2 match (``re2._Match``)."""

    def group(self, group: int | str = 0, /) -> str | None: ...

    def groupdict(self) -> dict[str, str | None]: ...

    def start(self, group: int | str = 0, /) -> int: ...

    def end(self, group: int | str = 0, /) -> int: ...


class Linear:
    """A compiled RE2 pattern, ``search`` and ``fullmatch`` as in ``re``; linear in the text.

    Made from a compiled pattern (``linear``), or from its source (``deferred``), compiled when
    it is first used.
    """

    __slots__ = ("_re2", "source")

    def __init__(self, compiled: Any = None, source: str = "") -> None:
        self._re2 = compiled
        self.source = source

    def _compiled(self) -> Any:
        if self._re2 is None:
            self._re2 = compile_re2(self.source)
        return self._re2

    def search(self, text: str) -> Match | None:
        compiled = self._re2 or self._compiled()
        try:
            return cast("Match | None", compiled.search(text))
        except UnicodeEncodeError:
            return cast("Match | None", compiled.search(encodable(text)))

    def fullmatch(self, text: str) -> Match | None:
        compiled = self._re2 or self._compiled()
        try:
            return cast("Match | None", compiled.fullmatch(text))
        except UnicodeEncodeError:
            return cast("Match | None", compiled.fullmatch(encodable(text)))

    def sub(self, replacement: str, text: str) -> str:
        """Every match in ``text`` replaced by ``replacement`` (taken literally)."""
        compiled = self._re2 or self._compiled()
        literal = replacement.replace("\\", "\\\\")
        try:
            return cast(str, compiled.sub(literal, text))
        except UnicodeEncodeError:
            return cast(str, compiled.sub(literal, encodable(text)))


def escape(text: str) -> str:
    """``text`` as an RE2 pattern that matches it literally."""
    return cast(str, re2.escape(text))


def linear(pattern: str) -> Linear:
    """``pattern`` (RE2 syntax) compiled; raises ``re2.error`` when RE2 cannot compile it."""
    return Linear(compile_re2(pattern), pattern)


def deferred(pattern: str) -> Linear:
    """``pattern`` (RE2 syntax), compiled when it is first used: for mend's own patterns, fixed
    in its source (``tests/policy/test_regex_deferred.py`` compiles every one), so that those of
    a path a deployment never takes cost it nothing. Counted repetitions are expanded into RE2's
    program: ``\\S{1,1000}`` alone is about 1 MB (issue 43). Operators' patterns use ``linear``,
    whose error names them at load."""
    return Linear(None, pattern)


class TriggerSet:
    """Which of several trigger lists has a substring in a lowercased text.

    Short texts take ``in`` checks; long ones one RE2 set pass instead of a scan per trigger.
    """

    _LONG = 512

    def __init__(self, lists: Sequence[tuple[str, ...]]) -> None:
        self._lists = tuple(lists)
        self._set = re2.Set.SearchSet(options())
        slots: dict[str, int] = {}
        for trigger in sorted({t for triggers in lists for t in triggers}):
            slots[trigger] = self._set.Add(re2.escape(trigger))
        self._set.Compile()
        self._slots = tuple(frozenset(slots[t] for t in triggers) for triggers in lists)

    def present(self, lowered: str) -> list[bool]:
        """Per list: it is empty (always run) or one of its triggers occurs in ``lowered``."""
        if len(lowered) < self._LONG:
            return [not triggers or any(t in lowered for t in triggers) for triggers in self._lists]
        hits = set(self._match(lowered) or ())  # None, not [], when nothing matched
        return [not slots or not hits.isdisjoint(slots) for slots in self._slots]

    def _match(self, lowered: str) -> list[int] | None:
        try:
            return cast("list[int] | None", self._set.Match(lowered))
        except UnicodeEncodeError:
            return cast("list[int] | None", self._set.Match(encodable(lowered)))
