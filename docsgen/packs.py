"""The packs catalogue: every shipped rule file of ``rules/``, its rules and its test cases, and the
redaction detectors of ``rules/redaction/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from docsgen.models import escape_html


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def _header_comment(path: Path) -> str:
    """The comment lines a file opens with, as one paragraph."""
    words: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        words.append(line.lstrip("#").strip())
    return " ".join(word for word in words if word)


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return escape_html(" ".join(text.replace("|", "\\|").split()))


def _status(rule: dict[str, Any]) -> str:
    status = (rule.get("when") or {}).get("status")
    if status is None:
        return ""
    return ", ".join(str(s) for s in status) if isinstance(status, list) else str(status)


def pack_markdown(path: Path, tests: Path) -> str:
    """One pack: its description, a table of its rules, a table of its cases."""
    data = _load(path)
    name = data.get("pack") or path.stem
    parts = [f"## {name}\n", f"`rules/{path.name}`. {_header_comment(path)}\n"]
    parts.append("| rule | status | code | category | what it recognises |\n|---|---|---|---|---|")
    for rule in data.get("rules") or []:
        envelope = rule.get("envelope") or {}
        cells = (
            f"`{rule['id']}`",
            _status(rule),
            f"`{envelope.get('code', '')}`",
            envelope.get("category", ""),
            rule.get("description"),
        )
        parts.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    case_file = tests / path.name
    cases = (_load(case_file).get("cases") or []) if case_file.is_file() else []
    parts.append(f"\n{len(cases)} cases in `rules/tests/{path.name}` (`mend test` runs them):\n")
    if cases:
        parts.append("| case | expected rule | expected code |\n|---|---|---|")
        for case in cases:
            expect = case.get("expect") or {}
            row = (
                case.get("name"),
                f"`{expect['rule']}`" if "rule" in expect else "",
                f"`{expect['code']}`" if "code" in expect else "",
            )
            parts.append("| " + " | ".join(_cell(c) for c in row) + " |")
    parts.append("")
    return "\n".join(parts)


def detectors_markdown(directory: Path) -> str:
    """The redaction detector families: one table each."""
    parts: list[str] = []
    for path in sorted(directory.glob("*.yaml")):
        data = _load(path)
        parts.append(f"### {data.get('family', path.stem)}\n")
        parts.append(f"`rules/redaction/{path.name}`. {_cell(data.get('description'))}\n")
        parts.append("| detector | action | what it finds |\n|---|---|---|")
        for detector in data.get("detectors") or []:
            cells = (
                f"`{detector.get('name')}`",
                detector.get("action"),
                detector.get("description"),
            )
            parts.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        parts.append("")
    return "\n".join(parts)


def catalogue(rules: Path) -> str:
    """Every pack of ``rules`` in load order, then the redaction detectors."""
    packs = [pack_markdown(path, rules / "tests") for path in sorted(rules.glob("*.yaml"))]
    redaction = rules / "redaction"
    detectors = detectors_markdown(redaction) if redaction.is_dir() else ""
    return "\n".join([*packs, "## Redaction detectors\n", detectors])
