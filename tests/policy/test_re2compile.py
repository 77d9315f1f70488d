"""RE2 compiled one way: shared when the options are mend's, refused with the pattern named."""

from __future__ import annotations

import pytest
import re2

from proxy.config.re2compile import checked, compile_re2, options


def test_a_pattern_compiled_twice_is_compiled_once() -> None:
    """The packs and detectors name the same patterns again and again: one compiled form each."""
    assert compile_re2(r"tools\/call-shared") is compile_re2(r"tools\/call-shared")


def test_other_options_compile_a_form_of_their_own() -> None:
    """Options other than mend's (offsets into bytes, say) are never handed a shared form."""
    opts = options()
    opts.longest_match = True
    assert compile_re2("a+b", opts) is not compile_re2("a+b")
    assert compile_re2("a+b", opts).search("xaab").group() == "aab"


def test_a_refused_pattern_is_refused_every_time() -> None:
    """A bad pattern is not remembered as good: each load reports it with its file and line."""
    for _ in range(2):
        with pytest.raises(re2.error):
            compile_re2("(unclosed")
    with pytest.raises(ValueError, match=r"bad regex '\(unclosed'"):
        checked("(unclosed")
