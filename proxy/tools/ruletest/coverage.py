"""Recorded responses and how many a specific rule explains (``mend check --coverage DIR``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field, ValidationError

from proxy.config.yamlfile import RuleError, validation_problems
from proxy.policy.rules.ruleset import RuleSet
from proxy.policy.rules.words import counted
from proxy.tools.ruletest.cases import (
    CaseFile,
    CaseModel,
    Recorded,
    RequestSpec,
    ResponseSpec,
    RouteSpec,
)
from proxy.tools.ruletest.engines import exchange_for, run_exchange
from proxy.tools.ruletest.loading import parse_case_file

_STATUS_PREFIX = re.compile(r"^([1-5]\d\d)(?:[-_.]|$)")
_MEDIA_TYPES = {
    ".json": "application/json",
    ".html": "text/html; charset=utf-8",
    ".htm": "text/html; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".xml": "application/xml",
}
_META = ".meta.yaml"


class Meta(CaseModel):
    """``FILE.meta.yaml`` next to a body file: what its name cannot say."""

    status: int | None = Field(default=None, ge=100, le=599)
    headers: dict[str, str] = Field(default_factory=dict)
    request: RequestSpec = RequestSpec()
    route: RouteSpec = RouteSpec()
    #: why only a fallback should explain this response (coverage lists it apart, with the reason)
    deliberate: str | None = Field(default=None, min_length=1)


@dataclass(frozen=True, slots=True)
class RecordedResponse:
    name: str
    request: RequestSpec
    response: ResponseSpec
    success_rules: tuple[str, ...] = ()
    deliberate: str | None = None


def _from_body_file(file: Path) -> RecordedResponse:
    meta = Meta()
    sidecar = file.with_name(file.name + _META)
    if sidecar.exists():
        data, lines = parse_case_file(sidecar)
        try:
            meta = Meta.model_validate(data or {})
        except ValidationError as exc:
            raise RuleError(validation_problems(exc, str(sidecar), lines)) from exc
    status = meta.status
    if status is None and (match := _STATUS_PREFIX.match(file.name)):
        status = int(match.group(1))
    if status is None:
        raise RuleError(
            [f"{file}:1: no status: name the file like 503-{file.name} or add {sidecar.name}"]
        )
    headers = dict(meta.headers)
    media = _MEDIA_TYPES.get(file.suffix.lower())
    if media and not any(k.lower() == "content-type" for k in headers):
        headers["Content-Type"] = media
    try:
        body = file.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise RuleError([f"{file}:1: cannot read: {exc}"]) from exc
    response = ResponseSpec(status=status, headers=headers, body=body)
    return RecordedResponse(
        file.name, meta.request, response, meta.route.success_rules, meta.deliberate
    )


def _from_yaml(file: Path) -> list[RecordedResponse]:
    data, lines = parse_case_file(file)
    if isinstance(data, dict) and "cases" in data:
        try:
            parsed = CaseFile.model_validate(data)
        except ValidationError as exc:
            raise RuleError(validation_problems(exc, str(file), lines)) from exc
        return [
            RecordedResponse(
                f"{file.name}:{lines.get(('cases', i), 1)} {c.name}",
                c.request,
                c.response,
                c.route.success_rules,
            )
            for i, c in enumerate(parsed.cases)
            if c.response is not None  # a redact: case has no response to cover
        ]
    try:
        one = Recorded.model_validate(data)
    except ValidationError as exc:
        raise RuleError(validation_problems(exc, str(file), lines)) from exc
    return [
        RecordedResponse(
            one.name or file.name,
            one.request,
            one.response,
            one.route.success_rules,
            one.deliberate,
        )
    ]


def load_recorded(directory: Path) -> tuple[list[RecordedResponse], list[str]]:
    """The recorded responses in ``directory`` (sorted by file name), and the problems.

    The convention:

    * ``NAME.yaml`` / ``NAME.yml``: ``{response: {status, headers, json|body}, request: {...},
      route: {...}}`` -- one response in a test case's shape; a test case file (``cases:``)
      counts each of its cases.
    * any other file is a raw body. Its status is the three digits its name starts with
      (``503-nginx.html``, ``422_fastapi.json``); its Content-Type follows the extension (``.json``,
      ``.html``, ``.txt``, ``.xml``). A sidecar ``FILE.meta.yaml`` (``503-nginx.html.meta.yaml``)
      may give ``status``, ``headers``, ``request`` and ``route`` instead or in addition, and
      ``deliberate: REASON`` when only a fallback should explain the response (it is then listed
      apart, with the reason, not among the responses to write a rule for).
    * names starting with ``.`` are ignored.
    """
    if not directory.is_dir():
        return [], [f"{directory}:1: not a directory of recorded responses"]
    out: list[RecordedResponse] = []
    problems: list[str] = []
    for file in sorted(directory.iterdir()):
        if not file.is_file() or file.name.startswith(".") or file.name.endswith(_META):
            continue
        try:
            if file.suffix in {".yaml", ".yml"}:
                out.extend(_from_yaml(file))
            else:
                out.append(_from_body_file(file))
        except RuleError as exc:
            problems.extend(exc.problems)
    return out, problems


@dataclass
class Coverage:
    total: int = 0
    by_rule: dict[str, int] = field(default_factory=dict)
    fallback_only: list[tuple[str, str, str]] = field(default_factory=list)  # name, rule, code
    #: fallback-only on purpose: name, rule, code, the recorded reason
    deliberate: list[tuple[str, str, str, str]] = field(default_factory=list)
    passthrough: list[str] = field(default_factory=list)

    @property
    def specific(self) -> int:
        return sum(self.by_rule.values())

    def lines(self) -> list[str]:
        out = [
            f"coverage: {counted(self.total, 'response')}: "
            f"{counted(self.specific, 'matched specific rule')}, "
            f"{len(self.fallback_only)} only a fallback, "
            + (f"{len(self.deliberate)} left to a fallback on purpose, " if self.deliberate else "")
            + f"{len(self.passthrough)} passed through"
        ]
        if self.by_rule:
            out.append("matched specific rules:")
            width = max(len(r) for r in self.by_rule)
            out.extend(
                f"  {rule:<{width}}  {n}"
                for rule, n in sorted(self.by_rule.items(), key=lambda kv: (-kv[1], kv[0]))
            )
        if self.fallback_only:
            out.append("only a fallback matched (write a rule for these):")
            out.extend(f"  {name}  -> {rule} ({code})" for name, rule, code in self.fallback_only)
        if self.deliberate:
            out.append("left to a fallback on purpose (deliberate:):")
            out.extend(
                f"  {name}  -> {rule} ({code}): {why}" for name, rule, code, why in self.deliberate
            )
        if self.passthrough:
            out.append("passed through (no rule matched):")
            out.extend(f"  {name}" for name in self.passthrough)
        return out


def coverage(
    recorded: Iterable[RecordedResponse], ruleset_for: Callable[[tuple[str, ...]], RuleSet]
) -> Coverage:
    """Which rule answers each recorded response; ``ruleset_for(success_rules)`` picks the set."""
    result = Coverage()
    for item in recorded:
        result.total += 1
        ruleset = ruleset_for(item.success_rules)
        evaluation = run_exchange(ruleset, exchange_for(item.request, item.response))
        if evaluation is None:
            result.passthrough.append(item.name)
            continue
        rule = evaluation.match.rule
        if rule.is_fallback and item.deliberate:
            result.deliberate.append(
                (item.name, rule.id, evaluation.envelope.code, item.deliberate)
            )
        elif rule.is_fallback:
            result.fallback_only.append((item.name, rule.id, evaluation.envelope.code))
        else:
            result.by_rule[rule.id] = result.by_rule.get(rule.id, 0) + 1
    return result
