"""The MkDocs hook (``mkdocs.yml`` ``hooks:``): README.md as the site's front page, and the
generated references written into their pages at build time.

A page asks for a generated part with a marker line, ``<!-- mend:NAME -->``; NAME is one of
:data:`GENERATORS`. An unknown marker fails the build."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # mkdocs imports this file by path, not as part of a package
    sys.path.insert(0, str(ROOT))

from mkdocs.structure.files import File  # noqa: E402

from docsgen import generate  # noqa: E402

GENERATORS: dict[str, Callable[[], str]] = generate.GENERATORS


def on_files(files: Any, config: Any) -> Any:
    """Adds README.md, its links made relative to docs/, as the site's ``index.md``."""
    if files.get_file_from_path("index.md") is None:
        files.append(File.generated(config, "index.md", content=generate.front_page(ROOT)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replaces each marker with what its generator writes."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(f"{page.file.src_path}: unknown generated part {name!r}")
        return GENERATORS[name]()

    return generate.MARKER.sub(replace, markdown)
