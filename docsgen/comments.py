"""A model field's description: the ``#:`` comment lines directly above it in the class body."""

from __future__ import annotations

import inspect
import re
import textwrap

#: ``name: annotation`` at the start of a class-body line (a field, or a class variable)
_FIELD = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*:")


def field_comments(cls: type) -> dict[str, str]:
    """Each field of ``cls`` that has ``#:`` lines directly above it, and their text joined.

    Only the class's own body is read (not its bases'); a blank line or any other line between
    the comment and the field detaches it, as Sphinx's autodoc reads them."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()[1:]
    indent = min(
        (len(line) - len(line.lstrip()) for line in lines if line.strip()),
        default=0,
    )
    found: dict[str, str] = {}
    pending: list[str] = []
    for line in lines:
        if len(line) - len(line.lstrip()) != indent or not line.strip():
            pending = []
            continue
        body = line.strip()
        if body.startswith("#:"):
            pending.append(body[2:].strip())
            continue
        match = _FIELD.match(body)
        if match and pending:
            found[match.group(1)] = " ".join(pending)
        pending = []
    return found
