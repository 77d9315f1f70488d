"""mend's own RE2 patterns are compiled when first used; every one of them compiles."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from typing import Any

import pytest
import re2

import proxy
from proxy.policy.regex import Linear, deferred


def _linears(value: Any, depth: int = 0) -> Iterator[Linear]:
    if isinstance(value, Linear):
        yield value
    elif isinstance(value, (tuple, list)) and depth < 3:
        for item in value:
            yield from _linears(item, depth + 1)


def _module_patterns() -> list[tuple[str, Linear]]:
    found: list[tuple[str, Linear]] = []
    for info in pkgutil.walk_packages(proxy.__path__, "proxy."):
        if info.name.endswith("__main__"):  # runs the command line
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            found.extend((f"{info.name}.{name}", linear) for linear in _linears(value))
    return found


def test_every_pattern_of_mends_own_compiles() -> None:
    """A pattern written in mend's source is compiled at first use, not at import: each one is
    compiled here, so a typo fails this test rather than a request."""
    patterns = _module_patterns()
    assert len(patterns) > 25
    for name, pattern in patterns:
        pattern.search("")  # raises re2.error for a pattern RE2 refuses
        assert pattern._re2 is not None, name


def test_a_deferred_pattern_is_compiled_at_its_first_use() -> None:
    """Importing a module compiles none of its patterns (``\\S{1,1000}`` is about 1 MB)."""
    pattern = deferred(r"(?P<url>\S{1,1000}) failed")
    assert pattern._re2 is None
    match = pattern.search("GET /x failed")
    assert match is not None
    assert match.group("url") == "/x"
    assert pattern._re2 is not None


def test_a_bad_deferred_pattern_fails_at_its_first_use() -> None:
    """What ``test_every_pattern_of_mends_own_compiles`` guards against."""
    pattern = deferred("(unclosed")
    with pytest.raises(re2.error):
        pattern.search("x")
