"""RE2 compiled one way: mend's options, and a bad pattern as a ``ValueError`` that names it.

Every RE2 pattern mend compiles -- operators' rule, detector and redaction patterns, the policy's
own -- is compiled here, so that RE2 never logs an error itself (it is reported once, with its
file and line, by the loader) and every loader words a bad pattern the same way.
"""

from __future__ import annotations

import functools
from typing import Any

import re2

#: Distinct patterns whose compiled form is kept for the next compile of the same pattern.
COMPILED_MAX = 2048


def options() -> Any:
    """RE2 options for mend's patterns: errors are raised to the caller, never logged by RE2."""
    opts = re2.Options()
    opts.log_errors = False
    return opts


def compile_re2(pattern: str, opts: Any = None) -> Any:
    """``pattern`` compiled with ``opts`` (default ``options()``); ``re2.error`` when it is bad.

    With the default options the compiled form is shared: a compiled RE2 is immutable and safe
    to use from any thread, and the shipped packs and detectors compile the same pattern again
    and again (634 compiles of 294 patterns in one start, issue 43). Bounded like ``re``'s own
    cache; a pattern RE2 refuses is not kept.
    """
    return _compiled(pattern) if opts is None else re2.compile(pattern, opts)


@functools.lru_cache(maxsize=COMPILED_MAX)
def _compiled(pattern: str) -> Any:
    return re2.compile(pattern, options())


def checked(pattern: str, what: str = "regex") -> Any:
    """``pattern`` compiled; ``ValueError("bad {what} {pattern!r}: ...")`` when RE2 refuses it
    (a ``file:line`` error in whichever file wrote it)."""
    try:
        return compile_re2(pattern)
    except re2.error as exc:
        detail = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        raise ValueError(f"bad {what} {pattern!r}: {detail}") from exc
