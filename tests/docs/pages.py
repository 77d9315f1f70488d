"""The documentation's Markdown files, their links, headings and fenced blocks, for tests/docs."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from markdown.extensions.toc import slugify  # type: ignore[import-untyped]

from docsgen.generate import GENERATORS, MARKER

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def markdown_files() -> list[Path]:
    """README.md and every page under docs/."""
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


#: what is not the repository's own: the virtualenv, git's store, a built site, packaging output
_NOT_OURS = {".git", ".venv", "site", "build", "dist", "node_modules"}


def repository_markdown() -> list[Path]:
    """Every Markdown file of the checkout: the site's pages and every other README."""
    return sorted(
        path
        for path in ROOT.rglob("*.md")
        if not _NOT_OURS & set(path.relative_to(ROOT).parts)
        and not path.relative_to(ROOT).parts[0].endswith(".egg-info")
    )


#: a fenced block: its opening fence's info word and its text
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)
#: an inline link or image's target: ``[text](target)``, ``![alt](target "title")``
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
#: an ATX heading, and an explicit ``{#id}`` at its end
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*(?:\{#([\w-]+)\})?\s*$", re.M)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
#: the line before a block that says what kind of example it is: ``<!-- example: KIND -->``
_MARK = re.compile(r"<!-- example: ([a-z-]+) -->\s*$")


@dataclass(frozen=True, slots=True)
class Block:
    """A fenced block of a page: where it starts, its language, its text, its marker."""

    page: Path
    line: int
    lang: str
    text: str
    mark: str | None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page`` in order."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(before)
        found.append(
            Block(
                page=page,
                line=text.count("\n", 0, match.start()) + 1,
                lang=match.group(1),
                text=match.group(2),
                mark=mark.group(1) if mark else None,
            )
        )
    return found


def prose(page: Path) -> str:
    """``page`` without its fenced blocks and code spans: where links are."""
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    return _CODE_SPAN.sub("", text)


def links(page: Path) -> list[str]:
    """Every link target written in ``page``'s prose."""
    return _LINK.findall(prose(page))


@functools.cache
def generated(text: str) -> str:
    """A page's text with its generated parts written in, as the site shows it."""
    return MARKER.sub(lambda match: GENERATORS[match.group(1)](), text)


def anchors(page: Path) -> set[str]:
    """The ids of ``page``'s headings, as MkDocs' toc (and GitHub, for these) makes them."""
    text = _FENCE.sub("", generated(page.read_text(encoding="utf-8")))
    ids: set[str] = set()
    for _, title, explicit in _HEADING.findall(text):
        ids.add(explicit or slugify(_CODE_SPAN.sub(lambda m: m.group(0)[1:-1], title), "-"))
    return ids
