"""A fresh clone documents itself: every link in README.md and docs/ reaches a file of the
repository, and every ``#anchor`` a heading of its page; nothing cites a file that is not there."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.docs.pages import ROOT, anchors, links, markdown_files, prose, repository_markdown

PAGES = markdown_files()
EVERY_MD = repository_markdown()


def _broken(page: Path) -> list[str]:
    problems = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / unquote(path)).resolve() if path else page
        if not file.exists():
            problems.append(f"{target}: no such file")
        elif path and not file.is_relative_to(ROOT):
            problems.append(f"{target}: outside the repository")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            problems.append(f"{target}: no heading #{anchor} in {file.name}")
    return problems


@pytest.mark.parametrize("page", EVERY_MD, ids=[str(p.relative_to(ROOT)) for p in EVERY_MD])
def test_every_link_reaches_a_file_and_heading(page: Path) -> None:
    """Each relative link of the page (any Markdown file of the checkout: the site's pages,
    CHANGELOG.md, every README) names a file in the repository, and its anchor a heading."""
    assert _broken(page) == []


def test_the_walker_sees_a_broken_link(tmp_path: Path) -> None:
    """A link to a missing file and one to a missing heading are both reported."""
    page = tmp_path / "probe.md"
    page.write_text("# Probe\n\n[gone](gone.md) and [here](#nowhere) and [ok](#probe)\n")
    assert _broken(page) == ["gone.md: no such file", "#nowhere: no heading #nowhere in probe.md"]


#: files of the repository named in prose as code (``proxy/config/route.py``, ``bench/README.md``)
_NAMED_FILE = re.compile(
    r"`((?:proxy|rules|tests|docs|bench|demo|deploy|scripts|grafana|prometheus|docsgen)/"
    r"[\w./-]*\w)`"
)


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_file_named_in_code_exists(page: Path) -> None:
    """A repository path the page names in backticks (``proxy/edge/tls.py``) is in the clone."""
    text = page.read_text(encoding="utf-8")
    missing = sorted(
        {
            name
            for name in _NAMED_FILE.findall(text)
            if "*" not in name and "<" not in name and not (ROOT / name).exists()
        }
    )
    assert missing == []


#: a citation of the contract as a file of its own (spelt in two pieces, so this file is not one)
_CONTRACT_FILE = re.compile("CON" + r"TRACT(\.md| §)")


def test_nothing_cites_a_contract_file() -> None:
    """The contract is docs/contract.md: no page, module or test cites a file of it at the root."""
    citing = []
    for path in ROOT.rglob("*"):
        parts = path.relative_to(ROOT).parts
        if not path.is_file() or parts[0] in {".git", ".venv", "site"}:
            continue
        if parts[0].endswith(".egg-info"):
            continue
        if path.name == "CHANGELOG.md" or path.suffix not in {".md", ".py", ".yaml", ".yml"}:
            continue
        if _CONTRACT_FILE.search(path.read_text(encoding="utf-8", errors="replace")):
            citing.append(str(path.relative_to(ROOT)))
    assert citing == []


def test_readme_is_a_front_page() -> None:
    """README.md says what mend is, the two commands and a first example, and links the rest."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 120
    assert "make demo" in readme
    assert "make test" in readme
    assert {"docs/contract.md", "docs/getting-started.md", "docs/configuration.md"} <= {
        target.partition("#")[0] for target in links(ROOT / "README.md")
    }
    assert "](docs/" in prose(ROOT / "README.md")
