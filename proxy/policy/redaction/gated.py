"""An ``re`` pattern behind an RE2 gate: the exact pattern runs only where the gate can match."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any, cast

import re2

from proxy.config.re2compile import compile_re2, options
from proxy.policy.regex import Linear, encodable

#: RE2's unanchored search, for ``GatedPattern``'s offsets (the wrapper's ``search`` encodes the
#: text again on every call, and a body has as many calls as candidate offsets)
_UNANCHORED = re2._Anchor.UNANCHORED
#: RE2 calls one ``GatedPattern.sub`` makes before ``re`` scans the rest itself: each call also
#: runs to the end of its (widened, so possibly unbounded) match, so a text holding many near
#: matches would make them quadratic; a page holds a handful
_OFFSETS_ASKED = 8


def _finditer(compiled: Any, text: str) -> Iterator[Any]:
    """``compiled.finditer(text)``, total on lone surrogates like ``Linear``."""
    started = False
    try:
        for found in compiled.finditer(text):
            started = True
            yield found
    except UnicodeEncodeError:
        if started:  # the wrapper encodes before its first match: never happens
            raise
        yield from compiled.finditer(encodable(text))


# --- RE2 gates --------------------------------------------------------------------------------
# Python's re scans a case-insensitive alternation of words at every position of a body: a few
# hundred microseconds for 2 KB. RE2 answers "can this match at all?" for the same pattern in a
# few. A gate is the pattern made RE2-compatible by dropping what RE2 lacks (lookarounds,
# possessive and atomic groups): that only ever widens what it matches, so when the gate finds
# nothing the real pattern cannot match either, and the exact Python pattern runs only when it may.
# A gate saves time on text that cannot match; it does not bound the time ``re`` takes when it
# runs: the gated pattern itself must be linear (bounded or possessive quantifiers).


def re2_source(source: str) -> str:
    """An RE2 pattern matching at least everything the Python pattern ``source`` matches.

    Raises ``re2.error`` for what cannot be widened (a backreference, ``\\W`` inside a class).
    """
    out: list[str] = []
    i, n = 0, len(source)
    after_quantifier = False
    while i < n:
        char = source[i]
        if char in "*+?":
            if not (after_quantifier and char == "+"):
                out.append(char)  # a possessive +: the greedy form matches at least as much
            after_quantifier = not after_quantifier
            i += 1
        elif char == "{" and (m := _COUNTED.match(source, i)):
            # counts are expanded into RE2's program; "at least one" is wider and stays small
            out.append("*" if m.group(1) in ("", "0") else "+")
            i = m.end()
            after_quantifier = True
        else:
            piece, i = _atom(source, i)
            out.append(piece)
            after_quantifier = False
    return "".join(out)


def _atom(source: str, i: int) -> tuple[str, int]:
    """The widened form of what starts at ``source[i]`` (no quantifier), and where it ends."""
    if source[i] == "\\":
        escape, end = _escape_at(source, i)
        return _OUTSIDE.get(escape, _unicode_escape(escape)), end
    if source[i] == "[":
        return _widened_class(source, i)
    if source.startswith(("(?=", "(?!", "(?<=", "(?<!"), i):
        return "", _lookaround_end(source, i) + 1  # an assertion dropped only widens
    if source.startswith("(?P=", i):
        raise re2.error("backreference")
    if m := _GROUP_HEADER.match(source, i):
        return m.group(0), m.end()  # flags or a name: RE2 reads the same syntax
    if source.startswith("(?>", i):
        return "(?:", i + 3  # an atomic group matches what its plain group does, or less
    return _WIDENED_CHAR.get(source[i], source[i]), i + 1


def _widened_class(source: str, i: int) -> tuple[str, int]:
    """The character class at ``source[i]`` in RE2's syntax, Unicode-wide, and where it ends."""
    n = len(source)
    j = i + 1
    parts = ["["]
    inside = _INSIDE
    if j < n and source[j] == "^":
        parts.append("^")
        inside = _INSIDE_NEGATED
        j += 1
    if j < n and source[j] == "]":
        parts.append("\\]")
        j += 1
    while j < n and source[j] != "]":
        if source[j] == "\\":
            escape, j = _escape_at(source, j)
            if escape in _NEGATED:
                raise re2.error("a negated class escape inside a class")
            parts.append(inside.get(escape, _unicode_escape(escape)))
        else:
            parts.append(source[j])
            j += 1
    if parts[1] != "^" and re.fullmatch(source[i : j + 1], "i", re.IGNORECASE):
        if parts[-1] == "-":  # a last "-" is literal: after it, the i's made a range
            parts[-1] = "\\-"
        parts.append(_TURKISH_I)
    parts.append("]")
    return "".join(parts), j + 1


def _lookaround_end(source: str, i: int) -> int:
    """Where the lookaround group opening at ``source[i]`` closes (its ``)``)."""
    n = len(source)
    depth, j = 0, i
    while j < n:
        if source[j] == "\\":
            j += 2
            continue
        if source[j] == "[":
            j += 1
            while j < n and source[j] != "]":
                j += 2 if source[j] == "\\" else 1
        elif source[j] == "(":
            depth += 1
        elif source[j] == ")":
            depth -= 1
            if depth == 0:
                break
        j += 1
    return j


_COUNTED = re.compile(r"\{(\d*),?\d*\}")
_GROUP_HEADER = re.compile(r"\(\?(?:P<\w+>|[aiLmsux-]*[:)])")
# re.I folds i with U+0130 and U+0131 (Turkish dotted and dotless i), RE2's (?i) does not: every
# i may be one of them (only ever wider).
_TURKISH_I = r"\x{130}\x{131}"
#: Single characters the gate spells wider: Python's ``$`` also matches before a final newline,
#: and every i may be a Turkish one.
_WIDENED_CHAR = {"$": "(?m:$)", "i": f"[i{_TURKISH_I}]", "I": f"[I{_TURKISH_I}]"}
# Python's \w, \d, \s are Unicode-aware and RE2's are ASCII, so the gate spells them wider:
# the ASCII members, and every character past ASCII. That is never narrower than Python's, and
# a class of one range past ASCII is a few RE2 instructions where \p{L}\p{M}\p{N} is thousands
# (the gates of the shipped detectors were 8 MB of every sidecar's memory, issue 43). Only text
# past ASCII pays, with a "maybe" where the exact class would have said no; an ASCII text (the
# offsets ``sub`` asks for) meets the same gate as before. \b is dropped (an assertion removed only
# widens a match).
_PAST_ASCII = r"\x{80}-\x{10FFFF}"
_WORD_ASCII = "0-9A-Za-z_"
_SPACE_ASCII = r"\t\n\x0b\f\r \x{1c}-\x{1f}"
_OUTSIDE = {
    r"\w": f"[{_WORD_ASCII}{_PAST_ASCII}]",
    r"\W": f"[^{_WORD_ASCII}]",
    r"\d": f"[0-9{_PAST_ASCII}]",
    r"\D": "[^0-9]",
    r"\s": f"[{_SPACE_ASCII}{_PAST_ASCII}]",
    r"\S": f"[^{_SPACE_ASCII}]",
    r"\b": "",
    r"\B": "",
    r"\Z": r"\z",
}
#: Inside a class: wide in a plain one; in a negated one, the ASCII members only, so that what
#: the class excludes is never more than Python's does (its complement never narrower).
_INSIDE = {
    r"\w": _WORD_ASCII + _PAST_ASCII,
    r"\d": "0-9" + _PAST_ASCII,
    r"\s": _SPACE_ASCII + _PAST_ASCII,
}
_INSIDE_NEGATED = {r"\w": _WORD_ASCII, r"\d": "0-9", r"\s": _SPACE_ASCII}
_NEGATED = frozenset({r"\W", r"\D", r"\S"})


def _escape_at(source: str, i: int) -> tuple[str, int]:
    """The escape sequence starting at ``source[i]`` (a backslash) and the index after it."""
    nxt = source[i + 1 : i + 2]
    if nxt == "u":
        return source[i : i + 6], i + 6
    if nxt == "U":
        return source[i : i + 10], i + 10
    if nxt == "x" and source[i + 2 : i + 3] != "{":
        return source[i : i + 4], i + 4
    return source[i : i + 2], i + 2


def _unicode_escape(escape: str) -> str:
    if escape[:2] in ("\\u", "\\U"):
        return "\\x{" + escape[2:] + "}"
    if escape[1:2].isdigit() and escape[1:2] != "0":
        raise re2.error("backreference")
    return escape


class GatedPattern:
    """A ``re`` pattern behind an RE2 gate; same results, run only when it may match.

    The gate is the pattern widened (``re2_source``): wherever ``re`` can match, starting at some
    offset, the gate matches starting at that offset too. So ``sub`` of an ASCII text (offsets in
    bytes and characters agree) tries ``re`` only at the offsets RE2 finds, leftmost first, and
    at each one ``re.match`` decides, as ``re.sub``'s own scan would have there: the same result.
    ``re`` scanning every offset of a body for a case-insensitive alternation of words cost a
    2 KB HTML page ~400 µs (``key_value_secret``, issue 29); RE2 finds the few offsets in ~20.
    """

    __slots__ = ("_at", "_gate", "_re")

    def __init__(self, compiled: re.Pattern[str]) -> None:
        self._re = compiled
        flags = "".join(
            f for f, bit in (("i", re.I), ("s", re.S), ("m", re.M)) if compiled.flags & bit
        )
        try:
            source = re2_source(compiled.pattern)
            widened = f"(?{flags}){source}" if flags else source
            offsets = options()
            offsets.never_capture = True  # whether, and where a match starts: the DFA finds it
            starts = compile_re2(widened, offsets)
            self._gate: Linear | None = Linear(starts)
            self._at: Any = starts._regexp  # for offsets into bytes
        except re2.error:
            self._gate = None  # backreferences and the like: no gate, always run
            self._at = None

    def _may_match(self, text: str) -> bool:
        return self._gate is None or self._gate.search(text) is not None

    def search(self, text: str, *args: int) -> re.Match[str] | None:
        return self._re.search(text, *args) if self._may_match(text) else None

    def sub(self, repl: Any, text: str, count: int = 0) -> str:
        if self._at is not None and callable(repl) and text.isascii():
            return self._sub_where_it_may(repl, text, count)
        return self._re.sub(repl, text, count=count) if self._may_match(text) else text

    def _sub_where_it_may(self, repl: Callable[[re.Match[str]], str], text: str, count: int) -> str:
        data = text.encode("ascii")
        size = len(data)
        parts: list[str] = []
        last = pos = 0
        asked = 0
        while pos <= size:
            if asked == _OFFSETS_ASKED:  # RE2 finds a match's end too, possibly far: the rest
                return self._sub_rest(repl, text, count, parts, last, pos)  # is re's own scan
            asked += 1
            start = self._at.Match(_UNANCHORED, data, pos, size)[0][0]
            if start < 0:
                break
            match = self._re.match(text, start)
            if match is None:
                pos = start + 1
                continue
            if match.end() == start:  # an empty match: re.sub's own rules for those
                return self._re.sub(repl, text, count=count)
            parts.append(text[last:start])
            parts.append(repl(match))
            last = pos = match.end()
            if len(parts) == 2 * count:
                break
        if not parts:
            return text
        parts.append(text[last:])
        return "".join(parts)

    def _sub_rest(
        self,
        repl: Callable[[re.Match[str]], str],
        text: str,
        count: int,
        parts: list[str],
        last: int,
        pos: int,
    ) -> str:
        """``_sub_where_it_may`` finished by ``re`` scanning from ``pos`` (``finditer`` from
        an offset sees the text before it, as ``sub``'s own scan does)."""
        for match in self._re.finditer(text, pos):
            if match.end() == match.start():
                return self._re.sub(repl, text, count=count)
            parts.append(text[last : match.start()])
            parts.append(repl(match))
            last = match.end()
            if len(parts) == 2 * count:
                break
        if not parts:
            return text
        parts.append(text[last:])
        return "".join(parts)

    def finditer(self, text: str, *args: int) -> Iterator[re.Match[str]]:
        return self._re.finditer(text, *args) if self._may_match(text) else iter(())

    def findall(self, text: str, *args: int) -> list[Any]:
        return self._re.findall(text, *args) if self._may_match(text) else []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._re, name)  # match, fullmatch, split, pattern: anchored or cheap


class AnchoredPattern(GatedPattern):
    """A pattern that can only match where the RE2 pattern ``starts`` starts a match.

    ``re`` tries a lookbehind at every offset of a text; RE2 finds the few candidate offsets in
    one linear pass, and ``re`` confirms each one from there. Same matches, a fraction of the work
    on long bodies.
    """

    __slots__ = ("_starts",)

    def __init__(self, compiled: re.Pattern[str], starts: str) -> None:
        super().__init__(compiled)
        self._starts: Any = compile_re2(starts)

    def finditer(self, text: str, *args: int) -> Iterator[re.Match[str]]:
        if args:
            return super().finditer(text, *args)
        return self._confirmed(text)

    def _confirmed(self, text: str) -> Iterator[re.Match[str]]:
        end = 0
        for candidate in _finditer(self._starts, text):
            if candidate.start() < end:
                continue
            match = self._re.match(text, candidate.start())
            if match is not None:
                end = max(match.end(), match.start() + 1)
                yield match

    def search(self, text: str, *args: int) -> re.Match[str] | None:
        if args:
            return super().search(text, *args)
        return next(self._confirmed(text), None)

    def findall(self, text: str, *args: int) -> list[Any]:
        if args:
            return super().findall(text, *args)
        return [m.group(0) for m in self._confirmed(text)]

    def sub(self, repl: Any, text: str, count: int = 0) -> str:
        parts: list[str] = []
        last = 0
        for done, match in enumerate(self._confirmed(text), 1):
            parts.append(text[last : match.start()])
            parts.append(repl(match))
            last = match.end()
            if done == count:
                break
        if not parts:
            return text
        parts.append(text[last:])
        return "".join(parts)


def gated(compiled: re.Pattern[str]) -> re.Pattern[str]:
    """``compiled`` behind an RE2 gate (typed as the pattern it stands in for)."""
    return cast("re.Pattern[str]", GatedPattern(compiled))


def anchored(compiled: re.Pattern[str], starts: str) -> re.Pattern[str]:
    """``compiled``, tried only where the RE2 pattern ``starts`` begins a match."""
    return cast("re.Pattern[str]", AnchoredPattern(compiled, starts))
