"""Agent text, line by line and clause by clause: the middle of ``Redactor.scrub``.

``Lines.scrub_text`` drops stack frames, exception chains and what follows them (``frame``,
``chain`` and ``prefix`` detectors), masks secrets per line, and hands what is left to
``Clauses``: replacements (``replace`` detectors), then the cut of a sentence at the first clause
holding code, SQL or a driver message (``cut`` detectors), then a cap at a sentence boundary.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from proxy.policy.redaction.compiled import Record, Unit
from proxy.policy.redaction.functions import ascii_lower
from proxy.policy.redaction.gated import gated
from proxy.policy.redaction.sets import DetectorSet

#: A step of the engine itself (not a detector) told to an explanation: (step, text dropped).
Note = Callable[[str, str], None]

WS = re.compile(r"[ \t\f\v\u00a0\u2000-\u200b\u3000]+")
#: the source line a Python or Node frame quotes, right after it
_CODE_CONTEXT = re.compile(r"^\s{2,}\S")
#: a Python trace ends with its exception's line; the others start with it
_PYTHON_TRACE = "Traceback (most recent call last)"
#: a bare quoted identifier (a missing key, a field of the code) tells an agent nothing
_LONE_NAME = re.compile(r"\s*['\"`][\w.$:-]{1,200}['\"`]\s*")
# Tried only where a run of separators starts, which the leftmost match always does, and
# possessive: "+" then "*" over one class once took time cubic in a run (1,600 commas in a line:
# 15 s), now linear.
DANGLING = gated(
    re.compile(
        r"(?i)(?<![\s,:;(\[\-\u2014\"'])[\s,:;(\[\-\u2014\"']++"
        r"(?:\b(?:at|in|on|to|from|by|with|for|of|via|due to"
        r"|because|while|when|the|a|an|and|or|into|using|near|after|caused by|reason|is|was"
        r"|are|were|be|error|errors|fatal|warning|warn|exception|panic|sql|query|detail|hint)\b)?"
        r"[\s,:;(\[\-\u2014\"']*+$"
    )
)
_CLAUSE_ENDS: tuple[str, ...] = (": ", " - ", " -- ", " \u2014 ", "; ", " (", ", ", ". ")
_CLAUSE_ENDS += ("! ", "? ", " [", ' "', " '", " <", " {")


def _matching(units: tuple[Unit, ...]) -> Callable[[str], Any]:
    """A line's match by any of ``units``: the one joined pattern's ``match`` (the usual case)."""
    if not units:
        return lambda _: None
    if len(units) == 1:
        return units[0].pattern.match  # type: ignore[no-any-return]
    return lambda text: next((m for u in units if (m := u.pattern.match(text))), None)


def _unit_of(units: tuple[Unit, ...], match: Any) -> Unit:
    """The unit whose pattern made ``match`` (an RE2 wrapper holds its pattern in ``_re``)."""
    if len(units) == 1:
        return units[0]
    return next((u for u in units if getattr(u.pattern, "_re", u.pattern) is match.re), units[0])


class Lines:
    """Which lines of a text an agent may read (frames, chains and their aftermath go)."""

    def __init__(
        self, detectors: DetectorSet, clauses: Clauses, record: Record | None, note: Note | None
    ) -> None:
        self._clauses = clauses
        self._record = record
        #: told of the engine's own steps (explanations only)
        self._told = note
        self._frames, self._chains = detectors.frames, detectors.chains
        self._frame = _matching(detectors.frames)
        self._chain = _matching(detectors.chains)
        self._prefix = _matching(detectors.prefixes)

    def scrub_text(self, text: str, kinds: list[str]) -> str:
        text = self._clauses.blocks(text, kinds)
        kept: list[str] = []
        traced = chained = skip_context = False
        chain, frame, prefix, told = self._chain, self._frame, self._prefix, self._told
        for original in text.replace("\r", "\n").split("\n"):
            raw = WS.sub(" ", original).strip()
            if not raw:
                skip_context = False
                continue
            if found := chain(raw):
                self._dropped(self._chains, found, raw, kinds)
                chained, skip_context = True, False
                continue
            if found := frame(original):
                self._dropped(self._frames, found, raw, kinds)
                traced = skip_context = True
                continue
            if skip_context and _CODE_CONTEXT.match(original):
                skip_context = False  # the source line a Python or Node frame quotes
                if told is not None:
                    told("the source line a frame quotes", raw)
                continue
            skip_context = False
            if chained and traced:
                # the rest of a chain is the internal cause, not the agent's business
                if told is not None:
                    told("a line of an exception chain, after its trace", raw)
                continue
            if kept and raw == kept[-1]:
                continue
            if (traced or chained) and not prefix(raw):
                # past the first frame, only an exception's own line may say something useful;
                # the rest of a dump (locals, settings, request data) may not
                if told is not None:
                    told("a line after a stack frame that is no exception's", raw)
                continue
            kept.append(raw)
        return self._result(text, kept, traced or chained, kinds)

    def _dropped(self, units: tuple[Unit, ...], match: Any, raw: str, kinds: list[str]) -> None:
        if len(units) == 1 and self._record is None:
            kinds.append(units[0].kind)
            return
        unit = _unit_of(units, match)
        kinds.append(unit.kind)
        if self._record is not None:
            self._record(unit, match, raw, "")

    def _result(self, text: str, kept: list[str], traced: bool, kinds: list[str]) -> str:
        clauses = self._clauses
        if traced:
            cleaned = [clauses.clean_line(line, kinds) for line in kept]
            candidates = [c for c in cleaned if len(c.split()) >= 2]
            if _PYTHON_TRACE in text:
                candidates.reverse()
            if self._told is not None:
                for dropped in candidates[1:]:
                    self._told("a second exception line (the first one is kept)", dropped)
            result = candidates[0] if candidates else ""
        else:
            # secrets first, line by line: a header echo's value runs to the end of its line,
            # and once lines are joined it would swallow the next one
            masked = (clauses.mask(line, "[redacted]", kinds) for line in kept)
            result = clauses.clean_line(" ".join(masked), kinds)
        if _LONE_NAME.fullmatch(result):
            kinds.append("exception_class")
            if self._told is not None:
                self._told("a bare quoted name", result)
            return ""
        return clauses.cap(result)


class Clauses:
    """One line for an agent: secrets masked, internals replaced, cut at the first code."""

    def __init__(self, detectors: DetectorSet, max_length: int, record: Record | None) -> None:
        self._set = detectors
        self._max_length = max_length
        self._record = record
        #: each replace unit with its one trigger, when it has exactly one (a plain ``in``)
        self._replaces = [
            (u, u.triggers[0] if len(u.triggers) == 1 else None) for u in detectors.replaces
        ]
        paths = [i for i, u in enumerate(detectors.replaces) if u.kind == "file_path"]
        #: "in an internal path on line 9" is tidied right after the last path detector
        self._where_after = paths[-1] if paths else -1

    def mask(self, text: str, token: str, kinds: list[str]) -> str:
        """Every ``mask`` unit whose triggers ``text`` holds (``token``: "" counts only)."""
        units = self._set.masks
        present = self._set.mask_triggers.present(text.lower())
        record = self._record
        for unit, wanted in zip(units, present, strict=True):
            if wanted:
                text = unit.pattern.sub(unit.masker(token, kinds, record), text)
        return text

    def blocks(self, text: str, kinds: list[str]) -> str:
        """Masks that span lines (key blocks), before the text is read line by line."""
        if self._set.blocks:
            lowered = text.lower()
            for unit in self._set.blocks:
                if unit.triggered(lowered):
                    text = unit.pattern.sub(unit.masker("[redacted]", kinds, self._record), text)
        return text

    def clean_line(self, line: str, kinds: list[str]) -> str:
        line = self.strip_exception_prefix(line, kinds)
        line = self.mask(line, "[redacted]", kinds)
        lowered = line.lower()
        where_path = self._set.where_path
        for index, (unit, trigger) in enumerate(self._replaces):
            if (
                (trigger in lowered)
                if trigger is not None
                else (not unit.triggers or any(t in lowered for t in unit.triggers))
            ):
                replaced = unit.pattern.sub(unit.replacer(kinds, self._record), line)
                if replaced is not line:
                    line, lowered = replaced, replaced.lower()
            if index == self._where_after:
                line = where_path.sub("", line)
                lowered = line.lower()
        tidy = WS.sub(" ", line).strip()
        if tidy != line.strip():
            tidy = trim_dangling(tidy)
        return self.truncate(tidy, kinds)

    def strip_exception_prefix(self, line: str, kinds: list[str]) -> str:
        for _ in range(10):
            found = self._prefix(line)
            if found is None:
                break
            unit, match = found
            kinds.append(unit.kind)
            if unit.check is not None and unit.check(match.group(0)):
                # the message of a programming error is about code (a key, an attribute, a
                # null field), never about the request: nothing in it helps an agent
                if self._record is not None:
                    self._record(unit, match, line, "")
                return ""
            if self._record is not None:
                self._record(unit, match, match.group(0), "")
            line = line[match.end() :]
        return line

    def _prefix(self, line: str) -> tuple[Unit, Any] | None:
        """The first ``prefix`` unit matching at the start of ``line``, and its match."""
        for unit in self._set.prefixes:
            match = unit.pattern.match(line)
            if match is not None:
                return unit, match
        return None

    def truncate(self, line: str, kinds: list[str]) -> str:
        """Cut the line before the first internal detail, at the clause that holds it."""
        cut = len(line)
        found: list[tuple[Unit, int]] = []
        lowered = ascii_lower(line)
        for unit in self._set.cuts:
            position = unit.find(line, lowered)
            if position is not None:
                kinds.append(unit.kind)
                cut = min(cut, position)
                found.append((unit, position))
        if cut == len(line):
            return line
        head = line[:cut]
        boundary = max(head.rfind(sep) for sep in _CLAUSE_ENDS)
        head = head[: boundary + 1] if boundary >= 0 else ""
        head = trim_dangling(self._set.where_path.sub("", trim_dangling(head)))
        if self._record is not None:
            for unit, position in sorted(found, key=lambda f: f[1]):
                self._record(unit, None, line[position:], "")
        if len(head.split()) < 2:
            return ""
        return head if head[-1] in ".!?" else head + "."

    def cap(self, text: str) -> str:
        text = WS.sub(" ", text).strip()
        limit = self._max_length
        if len(text) <= limit:
            return text
        head = text[:limit]
        end = max(head.rfind(". "), head.rfind("! "), head.rfind("? "))
        if head[-1] in ".!?":
            end = len(head) - 1
        if end >= limit // 3:
            return head[: end + 1]
        space = head.rfind(" ", 0, limit - 3)
        cut = head[:space] if space > 0 else head[: limit - 3]
        return cut.rstrip(" ,;:") + "..."


def trim_dangling(text: str) -> str:
    """Drop what a cut leaves hanging at the end: separators, prepositions, log levels."""
    for _ in range(5):
        trimmed = DANGLING.sub("", text)
        if trimmed == text:
            break
        text = trimmed
    return text.strip()
