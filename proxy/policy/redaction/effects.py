"""What each detector did to a text: ``mend explain --redact FILE``, and the detector tests.

``explain_text`` runs the text through the engine twice, as an agent's envelope would hold it
(``scrub``) and as the operator's log would (``mask``), with a recorder that is told of every act:
which detector, of which kind, in which ``file:line``, found which span and made it what; and of
the engine's own steps that drop text (a JSON document read for its message only, the lines
after a stack frame, a debug page). ``acts_on`` asks one detector alone whether it acts on a text
(its ``catches`` and ``keeps``, and ``mend test`` cases).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.policy.redaction import functions, markup
from proxy.policy.redaction.compiled import Unit, member, unit_of
from proxy.policy.redaction.detectors import LoadedDetector
from proxy.policy.redaction.engine import Redactor, Scrubbed
from proxy.policy.redaction.lines import WS
from proxy.policy.redaction.sets import DetectorSet
from proxy.policy.shorten import shortened

#: how much of a long span an explanation shows
_SHOWN = 200


def _short(text: str) -> str:
    text = text.replace("\n", "\\n")
    return shortened(text, _SHOWN)


@dataclass(frozen=True, slots=True)
class Act:
    #: ``agent`` (what an envelope may hold) or ``log`` (the operator's log line)
    where: str
    #: the detector's name, or ``engine`` for a step of the engine itself
    detector: str
    kind: str | None
    action: str
    #: ``file:line`` of the detector (``config:redaction.<key>`` for an operator addition)
    source: str
    found: str
    replacement: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "where": self.where,
            "detector": self.detector,
            "kind": self.kind,
            "action": self.action,
            "source": self.source,
            "found": self.found,
            "replacement": self.replacement,
        }


@dataclass(frozen=True, slots=True)
class Explanation:
    text: str
    agent: Scrubbed
    log: Scrubbed
    acts: tuple[Act, ...]


class _Recorder:
    def __init__(self) -> None:
        self.where = "agent"
        self.acts: list[Act] = []

    def record(self, unit: Unit, match: Any, found: str, replacement: str) -> None:
        detector = unit.first
        if match is not None and len(unit.members) > 1:
            detector = member(unit, match.string, match.start(), match.end())
        spec = detector.spec
        self.acts.append(
            Act(self.where, spec.name, spec.kind, spec.action, detector.source, found, replacement)
        )

    def note(self, step: str, text: str) -> None:
        self.acts.append(Act(self.where, "engine", None, step, "", text, ""))


def explain_text(text: str, detectors: DetectorSet, *, neutral: str = "") -> Explanation:
    """``text`` as an agent and as the operator's log would get it, and every act on the way."""
    recorder = _Recorder()
    redactor = Redactor(detectors, neutral=neutral, record=recorder.record, note=recorder.note)
    agent = redactor.scrub(text)
    recorder.where = "log"
    log = redactor.mask(text)
    return Explanation(text, agent, log, tuple(recorder.acts))


def as_json(explanation: Explanation) -> dict[str, Any]:
    return {
        "agent": {"text": explanation.agent.text, "kinds": list(explanation.agent.kinds)},
        "log": {"text": explanation.log.text, "kinds": list(explanation.log.kinds)},
        "acts": [act.as_dict() for act in explanation.acts],
    }


def as_text(explanation: Explanation) -> str:
    lines = []
    for where, result, title in (
        ("agent", explanation.agent, "what an agent reads (every string of an envelope)"),
        ("log", explanation.log, "what the operator's log keeps (secrets masked)"),
    ):
        kinds = ", ".join(result.kinds) or "nothing found"
        lines += [f"{title}:", f"  {_short(result.text) or '(empty)'}", f"  kinds: {kinds}"]
        acts = [a for a in explanation.acts if a.where == where]
        for act in acts:
            if act.detector == "engine":
                lines.append(f"  - engine: {act.action}: {_short(act.found)!r}")
                continue
            made = f" -> {act.replacement!r}" if act.replacement else " (removed)"
            lines.append(
                f"  - {act.detector} ({act.kind}, {act.action}, {act.source}): "
                f"{_short(act.found)!r}{made}"
            )
        if not acts:
            lines.append("  - no detector acted")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def acts_on(detector: LoadedDetector, text: str, context: functions.Context | None = None) -> bool:
    """Whether ``detector``, alone, acts on ``text`` (masks, replaces, cuts or drops a line)."""
    spec = detector.spec
    if spec.action == "page":
        html_page = markup.HTML.search(text) is not None
        lowered = text.lower()
        return (html_page or not spec.html_only) and any(t in lowered for t in spec.triggers)
    unit = unit_of([detector], context or functions.Context())
    if spec.action in ("frame", "chain", "prefix"):
        lines = text.split("\n")
        if spec.action != "frame":
            lines = [WS.sub(" ", line).strip() for line in lines]
        return any(unit.pattern.match(line) is not None for line in lines)
    if spec.action == "cut":
        return unit.find(text, functions.ascii_lower(text)) is not None
    if not unit.triggered(text.lower()):
        return False
    kinds: list[str] = []
    if spec.action == "mask":
        unit.pattern.sub(unit.masker("[masked]", kinds, None), text)
    else:
        unit.pattern.sub(unit.replacer(kinds, None), text)
    return bool(kinds)
