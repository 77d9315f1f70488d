"""Detector files: the declared pieces redaction is made of, validated like rule files.

A detector file is YAML::

    family: secrets                 # optional; the file's stem by default
    description: Credentials of known formats ...
    detectors:
      - name: aws_access_key        # unique across every file loaded
        kind: cloud_key             # the label it counts under (mend_redactions_total{kind})
        action: mask                # see ACTIONS
        description: AWS access key ids
        pattern: '\\b(?:AKIA|ASIA)[A-Z0-9]{16}\\b'   # RE2; a list of strings is concatenated
        group: 0                    # the group masked or replaced (0: the whole match)
        triggers: [akia, asia]      # lowercase literals, one of which every match holds
        check: random_token         # a named function that decides
        (proxy/policy/redaction/functions.py)
        catches: [AKIAIOSFODNN7EXAMPLE]     # texts it must act on ...
        keeps: [AKIA-is-not-a-key]          # ... and near misses it must leave (tests)

``engine: re`` (Python's ``re``, for lookarounds and possessive quantifiers RE2 lacks) is for
mend's own files only, and needs an RE2 gate -- ``triggers``, ``gate`` (``auto``: the pattern
widened to RE2, or an RE2 pattern) or ``starts`` (RE2: where a match may begin) -- unless its
action only matches at the start of a line. Its quantifiers must be bounded or possessive
(``docs/design.md``, "Regular expressions on untrusted text"). ``${source_ext}`` and
``${exc_suffix}`` in a pattern are the lists in ``functions.PATTERN_VARS``; a file's ``vars:``
adds its own.

Loading reports every problem as ``file:line: ...`` (``RuleError``), like rule files, and a set
that fails to load never replaces the one in force.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import re2
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from proxy.config.re2compile import checked
from proxy.config.sourcefile import MAX_FILE_BYTES, read_text
from proxy.config.yamlfile import RuleError, exhausted, parse_yaml, validation_problems
from proxy.policy.redaction import functions
from proxy.policy.redaction.gated import re2_source
from proxy.policy.rules.rulefile import rule_files

#: What a detector does with what it finds:
#: ``mask`` (a secret: ``[redacted]`` for agents, ``[masked]`` in the operator's log),
#: ``replace`` (agents only: the match becomes ``replacement``, "an internal host"),
#: ``cut`` (agents only: the sentence ends at the clause holding the match),
#: ``frame`` / ``chain`` (agents only: a line of a stack trace, or one starting an exception
#: chain; the line goes, and past it only an exception's own line may survive),
#: ``prefix`` (agents only: an exception class before a message, "FooError: "; ``check`` may
#: drop the whole message), ``page`` (agents only: a framework debug page, replaced whole;
#: ``triggers`` are its signs, no pattern).
ACTIONS = ("mask", "replace", "cut", "frame", "chain", "prefix", "page")
Action = Literal["mask", "replace", "cut", "frame", "chain", "prefix", "page"]
#: the actions that only ever match at the start of a line (their own linear bound)
LINE_START = frozenset({"frame", "chain", "prefix"})

#: One short stable label per family found (the ``kind`` label of ``mend_redactions_total``),
#: in the order ``Scrubbed.kinds`` lists them.
KINDS: tuple[str, ...] = (
    "debug_page",
    "stack_trace",
    "exception_chain",
    "exception_class",
    "file_path",
    "sql",
    "db_error",
    "connection_string",
    "internal_host",
    "private_address",
    "ip_address",
    "server_banner",
    "private_key",
    "jwt",
    "cloud_key",
    "credential_url",
    "secret",
    "never_show",
)

_NAME = r"^[a-z][a-z0-9_]*$"
_VAR = re.compile(r"\$\{(\w+)\}")
_FLAGS = re.compile(r"^\(\?([aiLmsux]+)\)")


def substitute(pattern: str, variables: dict[str, str]) -> str:
    """``${name}`` in ``pattern`` replaced by its variable; ``ValueError`` for an unknown one."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in variables:
            raise ValueError(
                f"unknown variable ${{{name}}} (known: {', '.join(sorted(variables))})"
            )
        return variables[name]

    return _VAR.sub(one, pattern)


def split_flags(source: str) -> tuple[str, str]:
    """``"(?i)body"`` -> ``("i", "body")``: a pattern's leading global flags and the rest."""
    match = _FLAGS.match(source)
    return ("", source) if match is None else (match.group(1), source[match.end() :])


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DetectorSpec(_Model):
    """One detector, as a file declares it (see the module docstring)."""

    name: str = Field(pattern=_NAME, max_length=64)
    kind: str
    action: Action
    description: str = ""
    engine: Literal["re2", "re"] = "re2"
    pattern: str | None = None
    group: int = Field(0, ge=0, le=99)
    triggers: tuple[str, ...] = ()
    gate: str | None = None
    starts: str | None = None
    #: ``cut``: the pattern is written in lowercase and read against the lowercased line
    lowered: bool = False
    #: ``replace``: what the match becomes ("an internal host"; may be empty)
    replacement: str | None = None
    check: str | None = None
    #: ``mask``: ``text`` also runs on the whole text before it is read line by line (a block)
    scope: Literal["line", "text"] = "line"
    #: ``page``: the signs count only in an HTML page
    html_only: bool = False
    #: whole words that may start a match in plain prose (short words and numbers, which skip
    #: every other detector); ``in_prose``: the pattern itself is tried on plain prose
    prose: tuple[str, ...] = ()
    in_prose: bool = False
    #: ``replace``: a host this pattern matches whole is internal (a URL to it is cut too)
    host_name: bool = False
    #: ``replace``: also in the operator's log, where the match becomes ``[masked]`` (an
    #: operator's internal names: what they add is hidden everywhere)
    log: bool = False
    #: run right after (or right before) this detector of the same action; by default an
    #: operator's mask detectors run first and their other detectors last
    after: str | None = None
    before: str | None = None
    catches: tuple[str, ...] = ()
    keeps: tuple[str, ...] = ()

    @field_validator("pattern", mode="before")
    @classmethod
    def _joined(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, list) and all(isinstance(part, str) for part in value):
            value = "".join(value)
        if isinstance(value, str):
            variables = (info.context or {}).get("vars", functions.PATTERN_VARS)
            return substitute(value, variables)
        return value

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        if value not in KINDS:
            raise ValueError(f"kind {value!r} is not one of {', '.join(KINDS)}")
        return value

    @field_validator("triggers", "prose")
    @classmethod
    def _lowercase(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for literal in value:
            if not literal or literal != literal.lower():
                raise ValueError(f"{literal!r}: triggers and prose words are lowercase literals")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> DetectorSpec:
        self._fields_fit_action()
        if self.action == "page":
            return self
        assert self.pattern is not None
        if self.engine == "re":
            self._check_re(self.pattern)
        else:
            compiled = checked(self.pattern, "regex")
            if self.gate is not None or self.starts is not None:
                raise ValueError("gate and starts are for engine: re (RE2 needs no gate)")
            groups = compiled.groups
            if compiled.search("") is not None:
                raise ValueError("the pattern matches the empty string")
            if self.group > groups:
                raise ValueError(f"group {self.group}: the pattern has {groups} groups")
        return self

    def _fields_fit_action(self) -> None:
        action = self.action
        if action == "page":
            if self.pattern is not None or not self.triggers:
                raise ValueError("a page detector has triggers (its signs) and no pattern")
        elif not self.pattern:
            raise ValueError(f"a {action} detector needs a pattern")
        if (action == "replace") != (self.replacement is not None):
            raise ValueError("replacement: required for replace, and only for it")
        if self.check is not None:
            known = functions.ALL_CHECKS.get(action, {})
            if self.check not in known:
                names = ", ".join(sorted(known)) or "none"
                raise ValueError(f"check {self.check!r} for {action}: known are {names}")
        for name, allowed in (
            ("lowered", action == "cut"),
            ("html_only", action == "page"),
            ("host_name", action == "replace"),
            ("log", action == "replace"),
        ):
            if getattr(self, name) and not allowed:
                raise ValueError(f"{name} does not apply to a {action} detector")
        if self.log and self.check is not None:
            raise ValueError("log: true masks the whole match: it takes no check")
        if self.scope == "text" and action != "mask":
            raise ValueError("scope: text is for mask detectors")
        if self.group and action not in ("mask", "replace"):
            raise ValueError("group is for mask and replace detectors")
        if self.after is not None and self.before is not None:
            raise ValueError("give after or before, not both")

    def _check_re(self, pattern: str) -> None:
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"bad regex {pattern!r}: {exc}") from exc
        if self.group > compiled.groups:
            raise ValueError(f"group {self.group}: the pattern has {compiled.groups} groups")
        gated = bool(self.triggers or self.gate or self.starts)
        if not gated and self.action not in LINE_START:
            raise ValueError("engine: re needs an RE2 gate: triggers, gate or starts")
        if self.gate == "auto":
            try:
                checked(re2_source(pattern), "gate")
            except (re2.error, ValueError) as exc:
                raise ValueError(f"gate: auto cannot widen this pattern to RE2: {exc}") from exc
        elif self.gate is not None:
            checked(self.gate, "gate")
        if self.starts is not None:
            checked(self.starts, "starts")


class DetectorFile(_Model):
    family: str | None = Field(None, pattern=_NAME)
    description: str = ""
    vars: dict[str, str] = {}
    detectors: list[DetectorSpec]


@dataclass(frozen=True, slots=True)
class LoadedDetector:
    spec: DetectorSpec
    #: ``file:line`` of its entry (``config:redaction.<key>`` for an operator addition)
    source: str
    family: str
    #: ``shipped`` (mend's files), ``config`` (made from ``redaction:``) or ``file`` (the
    #: operator's detector files: RE2 only)
    origin: Literal["shipped", "config", "file"]

    @property
    def trusted(self) -> bool:
        """May use ``engine: re``: its patterns are mend's own (or made by mend)."""
        return self.origin != "file"

    @property
    def name(self) -> str:
        return self.spec.name


def load_detector_text(text: str, name: str, *, shipped: bool) -> list[LoadedDetector]:
    """Validate one detector file; ``RuleError`` lists its ``file:line`` problems."""
    data, lines = parse_yaml(text, name)
    if data is None:
        return []
    if not isinstance(data, dict):
        raise RuleError([f"{name}:1: a detector file is a mapping with detectors: [...]"])
    variables = dict(functions.PATTERN_VARS)
    file_vars = data.get("vars")
    if isinstance(file_vars, dict):
        variables.update({str(k): str(v) for k, v in file_vars.items()})
    try:
        parsed = DetectorFile.model_validate(data, context={"vars": variables})
    except ValidationError as exc:
        raise RuleError(validation_problems(exc, name, lines, DetectorFile)) from exc
    except (RecursionError, MemoryError) as exc:
        raise exhausted(f"{name}:1", exc) from exc
    family = parsed.family or Path(name).stem.split("-", 1)[-1]
    origin: Literal["shipped", "file"] = "shipped" if shipped else "file"
    loaded = [
        LoadedDetector(spec, f"{name}:{lines.get(('detectors', i), 1)}", family, origin)
        for i, spec in enumerate(parsed.detectors)
    ]
    if not shipped:
        problems = [
            f"{d.source}: engine: re is for mend's own detectors; write {d.name} in RE2"
            for d in loaded
            if d.spec.engine == "re"
        ]
        if problems:
            raise RuleError(problems)
    return loaded


#: files already parsed, by name and text: a reload re-reads every file but parses (and compiles)
#: only those that changed (YAML parsing is most of the cost of a detector file)
_PARSED: dict[tuple[str, str, bool], list[LoadedDetector]] = {}
_PARSED_MAX = 256


def _parsed(text: str, name: str, shipped: bool) -> list[LoadedDetector]:
    key = (name, text, shipped)
    found = _PARSED.get(key)
    if found is None:
        found = load_detector_text(text, name, shipped=shipped)
        if len(_PARSED) >= _PARSED_MAX:
            del _PARSED[next(iter(_PARSED))]
        _PARSED[key] = found
    return found


def load_detector_files(
    paths: Iterable[Path], *, shipped: bool, max_bytes: int = MAX_FILE_BYTES
) -> list[LoadedDetector]:
    """Every detector of every file (each at most ``max_bytes``), in order; all problems of
    all files together."""
    problems: list[str] = []
    loaded: list[LoadedDetector] = []
    for file in rule_files(paths, kind="detector"):
        try:
            loaded.extend(_parsed(read_text(file, max_bytes), str(file), shipped))
        except RuleError as exc:
            problems.extend(exc.problems)
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{file}:1: cannot read: {exc}")
    if problems:
        raise RuleError(problems)
    return loaded


def shipped_directory() -> Path:
    """The shipped detector files: ``redaction/`` beside the rule packs (package data)."""
    from proxy.config.settings import PACKAGED_RULES  # noqa: PLC0415 (settings imports this package)

    return PACKAGED_RULES / "redaction"


def check_unique(detectors: Iterable[LoadedDetector]) -> None:
    """``RuleError`` for a name used twice, or an ``after`` naming no detector of its action."""
    problems: list[str] = []
    seen: dict[str, LoadedDetector] = {}
    for detector in detectors:
        first = seen.get(detector.name)
        if first is not None:
            problems.append(
                f"{detector.source}: duplicate detector name {detector.name!r} "
                f"(first at {first.source})"
            )
            continue
        seen[detector.name] = detector
    for detector in seen.values():
        for key in ("after", "before"):
            target = getattr(detector.spec, key)
            if target is not None and (
                target not in seen or seen[target].spec.action != detector.spec.action
            ):
                problems.append(
                    f"{detector.source}: {key}: no {detector.spec.action} detector named {target!r}"
                )
    if problems:
        raise RuleError(problems)
