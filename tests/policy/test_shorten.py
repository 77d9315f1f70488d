"""The one truncation helper: at most ``limit`` characters, an ellipsis where it cut."""

from __future__ import annotations

from proxy.policy.shorten import ELLIPSIS, shortened


def test_a_short_text_is_kept_whole() -> None:
    """A text of exactly ``limit`` characters is not cut."""
    assert shortened("abcde", 5) == "abcde"


def test_a_long_text_ends_in_the_ellipsis_within_the_limit() -> None:
    """The ellipsis counts toward the limit, so what is shown is ``limit`` long."""
    cut = shortened("abcdef", 5)
    assert cut == "abcd" + ELLIPSIS
    assert len(cut) == 5


def test_a_tidy_cut_drops_the_spaces_before_the_ellipsis() -> None:
    """``tidy``: a sentence cut between two words ends in ``word…``, not ``word …``."""
    assert shortened("one two three", 5, tidy=True) == "one…"
    assert shortened("one two three", 5) == "one …"
    assert shortened("one", 5, tidy=True) == "one"
