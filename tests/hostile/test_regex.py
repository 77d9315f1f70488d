"""Hostile text against mend's regular expressions: nothing an agent or upstream sends is slow.

Before: a ``**`` path glob compiled to Python's ``re``, and a long request path against
``/a/**/b/**/c/**/d`` backtracked for seconds (2 s at 40 KB, growing with the square of the
length) while every other request waited; an HTML body of repeated ``<title`` did the same to
``upstream_message``, and 20,000 digits in a value read with ``| duration`` took 39 s. A header
byte that is not UTF-8 (aiohttp decodes it as a lone surrogate) made every RE2 call raise
``UnicodeEncodeError``. ``docs/design.md`` lists every pattern and why it is safe.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.policy.envelope import build, constraints, variables
from proxy.policy.evaluate import recorded_exchange
from proxy.policy.exchange import Exchange
from proxy.policy.redaction import Redactor
from proxy.policy.redaction.gated import GatedPattern
from proxy.policy.redaction.lines import DANGLING
from proxy.policy.regex import Linear, linear
from proxy.policy.rules import matchers, template
from proxy.policy.rules.rulespec import When

#: Generous: each input below takes milliseconds now and took seconds before.
BUDGET_S = 0.5
GLOB = "/a/**/b/**/c/**/d"
LONG_PATH = "/a/" + "b/" * 50_000  # 100 KB


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()`` and the seconds it took."""
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def path_matches(glob: str, path: str) -> bool:
    """Whether a rule with ``when.path: glob`` accepts a request for ``path``."""
    (predicate,) = matchers.compile_when(When.model_validate({"path": glob}))
    exchange = Exchange(method="GET", path=path, route="r", request_id="id", request_headers={})
    return predicate(exchange, {})


def old_glob(pattern: str) -> re.Pattern[str]:
    """The translation to ``re`` that globs used before: the reference for their language."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] in "*?":
            out.append("[^/]*" if pattern[i] == "*" else "[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


# --- path globs (agent) --------------------------------------------------------------------------


def test_a_double_star_glob_rejects_a_100kb_path_at_once() -> None:
    """A long path that almost matches a ``**`` rule is refused in milliseconds, not seconds."""
    matched, seconds = timed(lambda: path_matches(GLOB, LONG_PATH))
    assert not matched
    assert seconds < BUDGET_S


def test_a_double_star_glob_accepts_a_100kb_path_at_once() -> None:
    """A long path that does match a ``**`` rule is accepted as fast."""
    matched, seconds = timed(lambda: path_matches(GLOB, LONG_PATH + "c/x/d"))
    assert matched
    assert seconds < BUDGET_S


def test_globs_compile_to_re2() -> None:
    """Path globs are RE2 patterns, matched whole."""
    assert isinstance(matchers._glob(GLOB), Linear)


_GLOB_CHARS = st.text(alphabet="ab/.*?-", max_size=12)
_PATH_CHARS = st.text(alphabet="ab/.*?-\n\u00e9", max_size=24)


@settings(max_examples=500, deadline=None)
@given(glob=_GLOB_CHARS, path=_PATH_CHARS)
def test_globs_match_the_same_paths_as_before(glob: str, path: str) -> None:
    """``**`` crosses slashes (not newlines), ``*`` and ``?`` stay in a segment: as with ``re``."""
    assert (matchers._glob(glob).fullmatch(path) is not None) == (
        old_glob(glob).match(path) is not None
    )


# --- lone surrogates (upstream and agent headers) ------------------------------------------------


def test_a_header_rule_reads_a_header_holding_a_lone_surrogate() -> None:
    """A non-UTF-8 header byte (decoded as a surrogate) neither raises nor hides a match."""
    (predicate,) = matchers.compile_when(
        When.model_validate({"headers": {"x-reason": "^quota (?P<left>.*)$"}})
    )
    exchange = Exchange(
        method="GET",
        path="/",
        route="r",
        request_id="id",
        request_headers={},
        headers={"x-reason": "quota \udcff0"},
    )
    found: dict[str, Any] = {}
    assert predicate(exchange, found)
    assert found == {"left": "\ufffd0"}


def test_scrub_reads_a_header_value_holding_a_lone_surrogate() -> None:
    """A kept upstream header with a non-UTF-8 byte is scrubbed, not an exception."""
    scrubbed = Redactor().scrub("Bearer abcdefghijklmnop\udcff, retry later")
    assert "abcdefghijklmnop" not in scrubbed.text


def test_mask_reads_a_long_text_holding_a_lone_surrogate() -> None:
    """The RE2 trigger set that long texts take is total on surrogates too."""
    masked = Redactor().mask("x" * 600 + "\udcff password=hunter22 " + "y" * 600)
    assert "hunter22" not in masked.text


def test_a_linear_pattern_keeps_offsets_across_a_surrogate() -> None:
    """A surrogate stands in for one character, so positions still index the original text."""
    match = linear("b+").search("a\udcffbb")
    assert match is not None
    assert (match.start(), match.end()) == (2, 4)


# --- redaction (upstream) ------------------------------------------------------------------------

_SEPARATOR = r"[\s,:;(\[\-\u2014\"']"
_OLD_DANGLING = re.compile(
    rf"(?i)(?:{_SEPARATOR})+(?:\b(?:at|in|on|to|from|by|with|for|of|via|due to"
    r"|because|while|when|the|a|an|and|or|into|using|near|after|caused by|reason|is|was"
    r"|are|were|be|error|errors|fatal|warning|warn|exception|panic|sql|query|detail|hint)\b)?"
    rf"{_SEPARATOR}*$"
)


def test_scrub_trims_a_long_run_of_separators_at_once() -> None:
    """A line with 100,000 commas before a word is scrubbed in milliseconds (1,600 took 15 s)."""
    text = "Server nginx/1.18 " + "," * 100_000 + "x,"
    _, seconds = timed(lambda: Redactor().scrub(text))
    assert seconds < BUDGET_S


_DANGLING_PARTS = st.sampled_from(
    [
        *(" ", ",", ":", "(", "-", "\u2014", '"', "\n", "x", "\u00e9", "1", "_"),
        *("at", "AT", "due", "to", "due to", "\u0131nto", "caused by", "a", "an", "and"),
        *("errors", "for", "or"),
    ]
)


@settings(max_examples=1000, deadline=None)
@given(text=st.lists(_DANGLING_PARTS, max_size=14).map("".join))
def test_dangling_trim_removes_what_it_removed_before(text: str) -> None:
    """Trying the trim only where a separator run starts, possessively, changes no result."""
    new = DANGLING
    assert new.sub("", text) == _OLD_DANGLING.sub("", text)


def test_a_gate_lets_through_what_re_folds_to_i() -> None:
    """``re.I`` reads U+0131 and U+0130 as i and RE2 does not: the gate must not refuse them."""
    pattern = re.compile(r"(?i)into[a-z]")
    assert pattern.search("\u0131nto\u0130") is not None
    assert GatedPattern(pattern).search("\u0131nto\u0130") is not None


# --- upstream bodies and values ------------------------------------------------------------------

_OLD_TITLE = re.compile(r"<(?:title|h1)[^>]*>([^<]{1,300})<", re.I)


def test_upstream_message_skims_a_body_of_repeated_title_tags() -> None:
    """``<title<title…`` (120 KB) without a ``>`` no longer costs a pass per tag."""
    ex = recorded_exchange(
        status=500, body=b"<title" * 20_000, headers={"Content-Type": "text/html"}
    )
    message, seconds = timed(lambda: build.upstream_message(ex))
    assert message is None
    assert seconds < BUDGET_S


@settings(max_examples=500, deadline=None)
@given(text=st.text(alphabet="<>/ tiTIle1h\u0130\u0131x\n", max_size=40))
def test_html_title_finds_what_re_found(text: str) -> None:
    """The RE2 title pattern (Turkish i folding spelled out) picks the same text as ``re.I``."""
    new, old = variables._HTML_TITLE.search(text), _OLD_TITLE.search(text)
    assert (new and new.group(1)) == (old and old.group(1))


def test_duration_reads_a_long_run_of_digits_at_once() -> None:
    """100,000 digits given to ``| duration`` are read once, not once per digit."""
    value, seconds = timed(lambda: template._duration("1" * 100_000 + "x"))
    assert value is None
    assert seconds < BUDGET_S


_OLD_DURATION_PART = re.compile(
    r"(\d+(?:\.\d+)?)\s*(ms|millis(?:econds?)?|s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?)"
    r"(?![a-z])",
    re.I,
)


@settings(max_examples=500, deadline=None)
@given(text=st.text(alphabet="0123456789. smhsecinutoSMH\u0663x", max_size=30))
def test_duration_parts_are_the_ones_re_found_before(text: str) -> None:
    """Trying a number only from its first digit finds exactly the parts found before."""
    assert template._DURATION_PART.findall(text) == _OLD_DURATION_PART.findall(text)


@pytest.mark.parametrize(
    "reason",
    [
        "must be one of " * 2_000 + "\nx",  # _ENUM: .+$ fails before the newline, per keyword
        "one of: a" + " " * 20_000 + "x",  # _ENUM_END: \s* rescans the run from every space
    ],
)
def test_a_long_reason_is_read_at_once(reason: str) -> None:
    """``from_reason`` reads one capped line whoever calls it (2 s and 41 s before)."""
    _, seconds = timed(lambda: constraints.from_reason(reason))
    assert seconds < BUDGET_S


@pytest.mark.parametrize("value", ["1e999", "inf", "-inf", "nan", "9" * 400, "9" * 400 + "s"])
def test_time_filters_take_any_upstream_number(value: str) -> None:
    """``ms``, ``int`` and ``duration`` answer None for numbers a float cannot hold (they raised
    OverflowError, failing the whole response's rewrite)."""
    assert template._ms(value) is None
    assert template._as_int(value) is None
    assert template._duration(value) is None


_SHIPPED_RE = [
    re.compile("".join(d["pattern"]) if isinstance(d["pattern"], list) else d["pattern"])
    for f in sorted((Path(__file__).parents[2] / "rules" / "redaction").glob("*.yaml"))
    for d in yaml.safe_load(f.read_text(encoding="utf-8"))["detectors"]
    if d.get("engine") == "re" and d.get("pattern")
]
_PIECES = [
    *"ab-_.:=@/ \n\"'<>",
    *("token", "Secret", "password", "://", "billing-x: ", "Name or service not known"),
    *("lookup ", " on ", "Bearer ", "exception", "</td><td>", "postgres://u:pw@h"),
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=40).map("".join))
def test_a_gated_sub_is_re_sub_at_the_offsets_re2_finds(text: str) -> None:
    """``GatedPattern.sub`` of an ASCII text tries ``re`` only where the widened RE2 pattern
    starts a match (issue 29: a 2 KB HTML page cost ~400 µs in one detector's scan): the same
    text as ``re.sub`` for every shipped ``engine: re`` pattern. The widening once lost a ``-``
    in a class (``[\\w-]`` read as a range up to U+0130), so a match could start earlier in
    ``re`` than in RE2: ``billing-x: Name or service not known``."""

    def marked(match: re.Match[str]) -> str:
        return f"<{match.group(0)}>"

    assert len(_SHIPPED_RE) > 20
    for compiled, gated in _gated_shipped():
        assert gated.sub(marked, text) == compiled.sub(marked, text)


_PAST_ASCII = (
    *"\u00f1\u0130\u0131\u00a0\u2003\u0663\u00bd\u212a\u2014",
    "Stra\u00dfe",
    "\u0442\u043e\u043a\u0435\u043d",
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([*_PIECES, *_PAST_ASCII]), max_size=40).map("".join))
def test_a_gate_never_refuses_text_past_ascii_that_re_matches(text: str) -> None:
    """The gates spell Python's Unicode \\w, \\d and \\s as their ASCII members plus every
    character past ASCII (issue 43: \\p{L}\\p{M}\\p{N} made them 8 MB): on text with letters,
    digits and spaces of other scripts, every shipped ``engine: re`` pattern still finds and
    replaces what ``re`` does."""

    def marked(match: re.Match[str]) -> str:
        return f"<{match.group(0)}>"

    for compiled, gated in _gated_shipped():
        assert gated.sub(marked, text) == compiled.sub(marked, text)
        assert (gated.search(text) is None) == (compiled.search(text) is None)


@functools.cache
def _gated_shipped() -> list[tuple[re.Pattern[str], GatedPattern]]:
    """Each shipped ``engine: re`` pattern with its gate, made once for all the examples (the
    RE2 compile of the widened pattern was most of the test's 50 s)."""
    return [(compiled, GatedPattern(compiled)) for compiled in _SHIPPED_RE]
