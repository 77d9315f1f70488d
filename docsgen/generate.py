"""What each generated part of the site is, by the name its page's marker gives."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from docsgen import cli, models, packs
from proxy.config.settings import Settings
from proxy.policy.rules.rulespec import RuleFile

ROOT = Path(__file__).resolve().parent.parent


def settings() -> str:
    return models.markdown(Settings)


def rule_file() -> str:
    return models.markdown(RuleFile)


GENERATORS: dict[str, Callable[[], str]] = {
    "settings": settings,
    "rule-file": rule_file,
    "packs": lambda: packs.catalogue(ROOT / "rules"),
    "cli": cli.markdown,
}

#: where a page asks for a generated part: a line ``<!-- mend:NAME -->``
MARKER = re.compile(r"^<!-- mend:([a-z_-]+) -->$", re.MULTILINE)

#: a Markdown link's target into docs/: ``](docs/x.md)`` or ``](docs/x.md#anchor)``
_DOCS_LINK = re.compile(r"\]\(docs/")


def front_page(root: Path) -> str:
    """README.md as the site's index page: its links into ``docs/`` made relative to it."""
    return _DOCS_LINK.sub("](", (root / "README.md").read_text(encoding="utf-8"))
