"""Rule files read, validated once at load (``rulespec.py``: the schema), with ``file:line`` errors.

The loader keeps the line of every YAML node so that a validation error points at the line the
operator must edit; a pack's rules are checked together (undefined variables, a rule that can
never match), and every file's problems are reported at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from proxy.config.sourcefile import read_text
from proxy.config.yamlfile import RuleError, exhausted, parse_yaml, validation_problems
from proxy.policy.rules.rulecheck import never_matching, undefined_variables
from proxy.policy.rules.rulespec import RuleFile, RuleSpec


@dataclass(frozen=True, slots=True)
class LoadedRule:
    spec: RuleSpec
    pack: str
    source: str  # "file:line", for explain and the catalog


def load_rule_text(text: str, name: str, default_pack: str) -> list[LoadedRule]:
    data, lines = parse_yaml(text, name)
    if data is None:
        return []
    if isinstance(data, list):  # a bare list of rules is a file too
        data = {"rules": data}
        lines = {(("rules", *k) if k else k): v for k, v in lines.items()}
    try:
        parsed = RuleFile.model_validate(data)
    except ValidationError as exc:
        raise RuleError(validation_problems(exc, name, lines, RuleFile)) from exc
    except (RecursionError, MemoryError) as exc:  # a validator's library ran out
        raise exhausted(f"{name}:1", exc) from exc
    if not parsed.enabled:
        return []
    pack = parsed.pack or default_pack
    loaded = [
        LoadedRule(rule, pack, f"{name}:{lines.get(('rules', i), 1)}")
        for i, rule in enumerate(parsed.rules)
    ]
    problems = [
        f"{rule.source}: {problem}"
        for rule in loaded
        for problem in undefined_variables(rule.spec, pack)
    ]
    if pack != "proxy":  # mend's own failures are chosen by id, never matched
        problems.extend(never_matching(loaded))
    if problems:
        raise RuleError(problems)
    return loaded


def rule_files(paths: Iterable[Path], kind: str = "rule") -> Iterator[Path]:
    """Files named by ``paths``: a directory means its ``*.yaml``/``*.yml`` files, sorted. A
    path that does not exist is a ``RuleError`` naming the ``kind`` of file it should be."""
    for path in paths:
        if path.is_dir():
            yield from sorted(p for p in path.iterdir() if p.suffix in {".yaml", ".yml"})
        elif path.exists():
            yield path
        else:
            raise RuleError([f"{path}:1: no such {kind} file or directory"])


def load_rules(
    paths: Iterable[Path], disabled_packs: Iterable[str] = (), *, max_bytes: int = 8 << 20
) -> list[LoadedRule]:
    """Load and validate every file (each at most ``max_bytes``, ``proxy/config/sourcefile.py``);
    all
    problems of all files are reported together."""

    disabled = set(disabled_packs)
    problems: list[str] = []
    loaded: list[LoadedRule] = []
    seen: dict[str, str] = {}
    try:
        files = list(rule_files(paths))
    except RuleError as exc:
        raise RuleError(exc.problems) from None
    for file in files:
        try:
            text = read_text(file, max_bytes)
            rules = load_rule_text(text, str(file), default_pack=file.stem)
        except RuleError as exc:
            problems.extend(exc.problems)
            continue
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{file}:1: cannot read: {exc}")
            continue
        for rule in rules:
            if rule.pack in disabled:
                continue
            if rule.spec.id in seen:
                first = seen[rule.spec.id]
                problems.append(
                    f"{rule.source}: duplicate rule id {rule.spec.id!r} (first at {first})"
                )
                continue
            seen[rule.spec.id] = rule.source
            loaded.append(rule)
    if problems:
        raise RuleError(problems)
    return loaded
