"""A detector set compiled for the engine: units in the order each action runs them.

A unit is one compiled pattern and what to do with a match. Detectors map to units one to one,
except that adjacent ``mask`` detectors of one kind that mask their whole match (no group, no
check) are joined into one alternation -- exactly the single pattern they were split from, run
in one pass -- and that every ``frame`` (and every ``chain``) detector of one engine is joined
into one pattern, since a line only asks whether any of them matches it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from typing import Any

from proxy.config.re2compile import compile_re2
from proxy.policy.redaction import functions
from proxy.policy.redaction.detectors import LoadedDetector, split_flags
from proxy.policy.redaction.gated import GatedPattern, anchored, gated
from proxy.policy.regex import Linear, encodable

#: ``record(unit, match, found, replacement)``: what ``mend explain --redact`` is told of each act
Record = Callable[["Unit", Any, str, str], None]


class Re2Pattern:
    """An RE2 pattern with the part of ``re``'s API the engine uses; total on lone surrogates."""

    __slots__ = ("_re", "groups", "pattern")

    def __init__(self, source: str) -> None:
        self._re: Any = compile_re2(source)
        self.pattern = source
        self.groups: int = self._re.groups

    def _call(self, method: str, text: str) -> Any:
        try:
            return getattr(self._re, method)(text)
        except UnicodeEncodeError:
            return getattr(self._re, method)(encodable(text))

    def search(self, text: str) -> Any:
        return self._call("search", text)

    def match(self, text: str) -> Any:
        return self._call("match", text)

    def fullmatch(self, text: str) -> Any:
        return self._call("fullmatch", text)

    def finditer(self, text: str) -> Iterator[Any]:
        try:
            found = list(self._re.finditer(text))
        except UnicodeEncodeError:
            found = list(self._re.finditer(encodable(text)))
        return iter(found)

    def sub(self, repl: Callable[[Any], str], text: str) -> str:
        parts: list[str] = []
        last = 0
        for match in self.finditer(text):
            parts.append(text[last : match.start()])
            parts.append(repl(match))
            last = match.end()
        if not parts:
            return text
        parts.append(text[last:])
        return "".join(parts)


class _ExplicitGate(GatedPattern):
    """A ``re`` pattern behind the RE2 gate its detector names."""

    __slots__ = ()

    def __init__(self, compiled: re.Pattern[str], gate: str) -> None:
        super().__init__(compiled)
        self._gate = Linear(compile_re2(gate))


@lru_cache(maxsize=1024)
def _member(source: str, engine: str) -> Any:
    return re.compile(source) if engine == "re" else Re2Pattern(source)


def _member_end(detector: LoadedDetector, text: str, start: int) -> int | None:
    """Where ``detector``'s own pattern ends a match starting at ``start``, or ``None``."""
    spec = detector.spec
    compiled = _member(spec.pattern or "", spec.engine)
    if spec.engine == "re":
        found = compiled.match(text, start)
        return None if found is None else int(found.end())
    found = compiled.match(text[start:])
    return None if found is None else start + int(found.end())


def compile_pattern(source: str, engine: str, gate: str | None, starts: str | None) -> Any:
    """The object a unit searches with: ``re`` (gated as declared) or RE2."""
    if engine != "re":
        return Re2Pattern(source)
    compiled = re.compile(source)
    if starts is not None:
        return anchored(compiled, starts)
    if gate == "auto":
        return gated(compiled)
    if gate is not None:
        return _ExplicitGate(compiled, gate)
    return compiled


class Unit:
    """One compiled pattern of one action; ``members`` are the detectors joined into it.

    What the hot paths read of the first member's spec is copied into slots once.
    """

    __slots__ = (
        "action",
        "allowed",
        "check",
        "context",
        "first",
        "group",
        "kind",
        "lowered",
        "members",
        "pattern",
        "triggers",
        "word",
    )

    def __init__(
        self,
        members: tuple[LoadedDetector, ...],
        pattern: Any,
        triggers: tuple[str, ...] = (),
        context: functions.Context | None = None,
    ) -> None:
        self.members = members
        self.pattern = pattern
        self.triggers = triggers
        self.context = context or functions.Context()
        self.first = members[0]
        spec = self.first.spec
        self.kind: str = spec.kind
        self.action: str = spec.action
        self.group = spec.group
        self.word = spec.replacement or ""
        self.lowered = spec.lowered
        checks = functions.ALL_CHECKS.get(spec.action, {})
        self.check: Any = checks[spec.check] if spec.check else None
        #: the operator's allow list (``None`` without one: nothing to test)
        self.allowed = self.context.allowed if self.context.allow else None

    def triggered(self, lowered: str) -> bool:
        return not self.triggers or any(t in lowered for t in self.triggers)

    # --- mask ------------------------------------------------------------------------------

    def masker(self, token: str, kinds: list[str], record: Record | None) -> Callable[..., str]:
        """``re.sub`` callback: the value (the group, or the whole match) becomes ``token``."""
        group, kind, context, check, allowed = (
            self.group,
            self.kind,
            self.context,
            self.check,
            self.allowed,
        )

        def replace(match: Any) -> str:
            whole: str = match.group(0)
            value: str | None = match.group(group) if group else whole
            if not value:
                return whole
            if check is not None and not check(value, context):
                return whole
            if allowed is not None and allowed(value.strip("\"'").strip()):
                return whole
            kinds.append(kind)
            if not group:
                if record is not None:
                    record(self, match, whole, token)
                return token
            start = match.start(group) - match.start(0)
            end = match.end(group) - match.start(0)
            quote = value[0] if value[0] in "\"'" and len(value) > 1 else ""
            if record is not None:
                record(self, match, value, quote + token + quote)
            return whole[:start] + quote + token + quote + whole[end:]

        return replace

    # --- replace ----------------------------------------------------------------------------

    def replacer(self, kinds: list[str], record: Record | None) -> Callable[..., str]:
        """``re.sub`` callback: the match becomes the detector's word (if its check agrees)."""
        word, kind, group, context = self.word, self.kind, self.group, self.context
        check, allowed = self.check, self.allowed

        def replace(match: Any) -> str:
            whole: str = match.group(0)
            if allowed is not None and allowed(whole):
                return whole
            if check is not None:
                decided: functions.Replacement | None = check(match, word, context)
                if decided is None:
                    return whole
                kinds.append(decided[0] or kind)
                if record is not None:
                    record(self, match, whole, decided[1])
                return decided[1]
            if group:
                value = match.group(group)
                if value is None or (allowed is not None and allowed(value)):
                    return whole
                start = match.start(group) - match.start(0)
                end = match.end(group) - match.start(0)
                replaced = whole[:start] + word + whole[end:]
            else:
                # keep the whitespace the match swallowed, or the next word would glue to ours
                before = " " if whole[:1].isspace() else ""
                after = " " if whole[-1:].isspace() else ""
                replaced = before + word + after
            kinds.append(kind)
            if record is not None:
                record(self, match, whole, replaced)
            return replaced

        return replace

    # --- cut --------------------------------------------------------------------------------

    def find(self, line: str, lowered: str) -> int | None:
        """``cut``: where in ``line`` the internal part this unit finds starts, or ``None``."""
        if self.triggers and not any(t in lowered for t in self.triggers):
            return None
        subject = lowered if self.lowered else line
        check, allowed = self.check, self.allowed
        if check is None and allowed is None:
            match = self.pattern.search(subject)
            return None if match is None else int(match.start())
        for match in self.pattern.finditer(subject):
            if allowed is not None and allowed(match.group(0)):
                continue
            position = match.start() if check is None else check(line, match)
            if position is not None:
                return int(position)
        return None

    def may_match(self, text: str, lowered: str) -> bool:
        """Whether this unit finds anything in ``text`` (the plain-prose check)."""
        if self.action == "cut":
            return self.find(text, lowered) is not None
        if not self.triggered(lowered):
            return False
        subject = lowered if self.lowered else text
        return self.pattern.search(subject) is not None


def member(unit: Unit, text: str, start: int, end: int = -1) -> LoadedDetector:
    """The detector of ``unit`` that found ``text[start:end]`` (for explanations)."""
    if len(unit.members) > 1:
        for detector in unit.members:
            found = _member_end(detector, text, start)
            if found is not None and (end < 0 or found == end):
                return detector
    return unit.first


def joined(members: Sequence[LoadedDetector]) -> str:
    """One alternation of the members' patterns; shared leading flags are said once."""
    split = [split_flags(m.spec.pattern or "") for m in members]
    flags = {f for f, _ in split}
    if len(flags) == 1:
        (shared,) = flags
        body = "|".join(b for _, b in split)
        return f"(?{shared}){body}" if shared else body
    return "|".join(f"(?{f}:{b})" if f else f"(?:{b})" for f, b in split)


def mergeable(a: LoadedDetector, b: LoadedDetector) -> bool:
    """Adjacent mask detectors that mask their whole match the same way run as one pattern."""
    x, y = a.spec, b.spec
    return (
        x.action == y.action == "mask"
        and (x.kind, x.engine, x.scope, x.gate, x.in_prose)
        == (y.kind, y.engine, y.scope, y.gate, y.in_prose)
        and x.group == y.group == 0
        and x.check is None
        and y.check is None
        and x.starts is None
        and y.starts is None
        and bool(x.triggers) == bool(y.triggers)
    )


def unit_of(members: Sequence[LoadedDetector], context: functions.Context) -> Unit:
    first = members[0].spec
    source = joined(members) if len(members) > 1 else first.pattern or ""
    triggers: tuple[str, ...] = ()
    if all(m.spec.triggers for m in members):
        triggers = tuple(dict.fromkeys(t for m in members for t in m.spec.triggers))
    pattern = compile_pattern(source, first.engine, first.gate, first.starts) if source else None
    return Unit(tuple(members), pattern, triggers, context)
