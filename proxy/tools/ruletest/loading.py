"""Case files read: every ``*.yaml`` case under the paths given, with its file and line."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from proxy.config.settings import PACKAGED_RULES
from proxy.config.yamlfile import Lines, RuleError, parse_yaml, validation_problems
from proxy.tools.ruletest.cases import CaseFile, LoadedCase

#: Where ``mend test`` looks when given no paths.
DEFAULT_TESTS = PACKAGED_RULES / "tests"


def _yaml_files(paths: Iterable[Path]) -> Iterator[tuple[Path, bool]]:
    """(file, named explicitly) for each path; a directory means its YAML files, sorted."""
    for path in paths:
        if path.is_dir():
            for child in sorted(path.iterdir()):
                if child.is_file() and child.suffix in {".yaml", ".yml"}:
                    yield child, False
        elif path.exists():
            yield path, True
        else:
            raise RuleError([f"{path}:1: no such test file or directory"])


def parse_case_file(file: Path) -> tuple[Any, Lines]:
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError([f"{file}:1: cannot read: {exc}"]) from exc
    return parse_yaml(text, str(file))


def load_cases(paths: Sequence[Path]) -> tuple[list[LoadedCase], list[str]]:
    """Every case of every file, and the ``file:line`` problems of the files that do not load.

    A YAML file found in a directory that has ``rules:`` but no ``cases:`` is a rule file the
    cases use, not a case file, and is skipped.
    """
    cases: list[LoadedCase] = []
    problems: list[str] = []
    try:
        files = list(_yaml_files(paths))
    except RuleError as exc:
        return [], list(exc.problems)
    for file, explicit in files:
        try:
            data, lines = parse_case_file(file)
        except RuleError as exc:
            problems.extend(exc.problems)
            continue
        if isinstance(data, dict) and "cases" not in data and "rules" in data and not explicit:
            continue
        if not isinstance(data, dict):
            problems.append(f"{file}:1: a test file is a mapping with cases: [...]")
            continue
        try:
            parsed = CaseFile.model_validate(data)
        except ValidationError as exc:
            problems.extend(validation_problems(exc, str(file), lines))
            continue
        cases.extend(
            LoadedCase(case, file, lines.get(("cases", i), 1))
            for i, case in enumerate(parsed.cases)
        )
    return cases, problems
