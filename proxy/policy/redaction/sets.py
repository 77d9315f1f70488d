"""Loading and compiling a whole detector set: the shipped files plus an operator's additions.

``DetectorSet.build`` puts the detectors in the order they run (file order; an operator's mask
detectors first and other additions last, or right ``after:`` the detector they name), joins
what runs as one pattern (``compiled.py``) and collects what the engine asks of the whole set:
the trigger set of the masks, the words that make prose worth a full pass, the signs of a debug
page. ``default_set`` is the shipped set, loaded once for every ``Redactor()`` made without one;
``Engine.load`` loads the files again on every reload, so an edited file takes effect and a
broken one is refused with ``file:line``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from proxy.config.redaction import RedactionSettings
from proxy.config.sourcefile import MAX_FILE_BYTES
from proxy.policy.redaction import functions
from proxy.policy.redaction.additions import operator_detectors
from proxy.policy.redaction.compiled import Re2Pattern, Unit, mergeable, unit_of
from proxy.policy.redaction.detectors import (
    LoadedDetector,
    check_unique,
    load_detector_files,
    shipped_directory,
)
from proxy.policy.regex import TriggerSet


def place(detectors: Sequence[LoadedDetector]) -> list[LoadedDetector]:
    """The run order: the operator's masks, the shipped detectors in file order, the operator's
    other detectors; one with ``after:`` (``before:``) goes right after (before) its target, after
    those placed there earlier."""
    check_unique(detectors)
    free = [d for d in detectors if d.spec.after is None and d.spec.before is None]
    order = [
        *(d for d in free if d.origin != "shipped" and d.spec.action == "mask"),
        *(d for d in free if d.origin == "shipped"),
        *(d for d in free if d.origin != "shipped" and d.spec.action != "mask"),
    ]
    placed: dict[str, str] = {}
    for detector in detectors:
        target = detector.spec.after or detector.spec.before
        if target is None:
            continue
        index = next(i for i, d in enumerate(order) if d.name == target)
        if detector.spec.after is not None:
            index += 1
            while index < len(order) and placed.get(order[index].name) == f"after {target}":
                index += 1
        order.insert(index, detector)
        placed[detector.name] = f"{'after' if detector.spec.after else 'before'} {target}"
    return order


def _mask_units(masks: Sequence[LoadedDetector], context: functions.Context) -> list[Unit]:
    units: list[Unit] = []
    run: list[LoadedDetector] = []
    for detector in masks:
        if run and not mergeable(run[-1], detector):
            units.append(unit_of(run, context))
            run = []
        run.append(detector)
    if run:
        units.append(unit_of(run, context))
    return units


def _joined_units(lines: Sequence[LoadedDetector], context: functions.Context) -> list[Unit]:
    """Line detectors, one unit per engine: a line only asks whether any of them matches."""
    by_engine: dict[str, list[LoadedDetector]] = {}
    for detector in lines:
        by_engine.setdefault(detector.spec.engine, []).append(detector)
    return [unit_of(members, context) for members in by_engine.values()]


@dataclass(frozen=True, slots=True, eq=False)
class DetectorSet:
    """Every unit the engine runs, by action, in order; immutable and shared."""

    detectors: tuple[LoadedDetector, ...]
    masks: tuple[Unit, ...]
    mask_triggers: TriggerSet
    #: mask units also run over the whole text before it is read line by line (key blocks)
    blocks: tuple[Unit, ...]
    replaces: tuple[Unit, ...]
    #: replace units that also run on the operator's log (``log: true``), masking
    log_replaces: tuple[Unit, ...]
    cuts: tuple[Unit, ...]
    frames: tuple[Unit, ...]
    chains: tuple[Unit, ...]
    prefixes: tuple[Unit, ...]
    pages: tuple[LoadedDetector, ...]
    #: units that may match plain prose, and the words that may start the others there
    in_prose: tuple[Unit, ...]
    prose_words: re.Pattern[str] | None
    #: "in an internal path on line 9": what a path replacement leaves to tidy away
    where_path: re.Pattern[str]
    context: functions.Context

    @classmethod
    def build(cls, detectors: Sequence[LoadedDetector], allow: Sequence[str] = ()) -> DetectorSet:
        order = place(detectors)
        by_action: dict[str, list[LoadedDetector]] = {}
        for detector in order:
            by_action.setdefault(detector.spec.action, []).append(detector)
        plain = functions.Context(allow=tuple(Re2Pattern(p) for p in allow))
        hosts = [unit_of([d], plain) for d in by_action.get("replace", []) if d.spec.host_name]
        context = functions.Context(plain.allow, tuple(u.pattern for u in hosts))
        masks = _mask_units(by_action.get("mask", []), context)
        replaces = [unit_of([d], context) for d in by_action.get("replace", [])]
        cuts = [unit_of([d], context) for d in by_action.get("cut", [])]
        units = [*masks, *replaces, *cuts]
        words = list(dict.fromkeys(w for d in order for w in d.spec.prose))
        path_words = {
            d.spec.replacement
            for d in by_action.get("replace", [])
            if d.spec.kind == "file_path" and d.spec.replacement
        }
        return cls(
            detectors=tuple(order),
            masks=tuple(masks),
            mask_triggers=TriggerSet([u.triggers for u in masks]),
            blocks=tuple(u for u in masks if u.first.spec.scope == "text"),
            replaces=tuple(replaces),
            log_replaces=tuple(u for u in replaces if u.first.spec.log),
            cuts=tuple(cuts),
            frames=tuple(_joined_units(by_action.get("frame", []), context)),
            chains=tuple(_joined_units(by_action.get("chain", []), context)),
            prefixes=tuple(unit_of([d], context) for d in by_action.get("prefix", [])),
            pages=tuple(by_action.get("page", [])),
            in_prose=tuple(u for u in units if u.first.spec.in_prose),
            prose_words=(
                re.compile(r"\b(?:" + "|".join(map(re.escape, words)) + r")\b") if words else None
            ),
            where_path=_where_path(sorted(path_words)),
            context=context,
        )

    def named(self, name: str) -> LoadedDetector | None:
        return next((d for d in self.detectors if d.name == name), None)


def _where_path(words: Sequence[str]) -> re.Pattern[str]:
    """ " in an internal path on line 9": once the path is gone, the locator says nothing."""
    alternatives = "|".join(map(re.escape, words)) or "(?!)"
    return re.compile(
        rf"\s(?:in|at|from)\s{{1,3}}(?:{alternatives})(?:\s{{1,3}}on line \d{{1,6}})?(?=$|[.,;)])"
    )


def load_shipped(directory: Path | None = None) -> list[LoadedDetector]:
    """The shipped detector files (``RuleError`` with ``file:line`` when one is invalid)."""
    return load_detector_files([directory or shipped_directory()], shipped=True)


def build_set(
    shipped: Sequence[LoadedDetector],
    additions: RedactionSettings | None = None,
    *,
    max_bytes: int = MAX_FILE_BYTES,
) -> DetectorSet:
    """``shipped`` with ``additions`` (``RuleError`` when an operator detector file is bad, or
    over ``max_bytes``)."""
    if additions is None or additions.empty:
        return DetectorSet.build(shipped)
    extra = operator_detectors(additions, [d.name for d in shipped], max_bytes=max_bytes)
    return DetectorSet.build([*shipped, *extra], additions.allow)


@cache
def default_set() -> DetectorSet:
    """The shipped set, loaded once per process (``Engine.load`` reloads the files itself)."""
    return build_set(load_shipped())
