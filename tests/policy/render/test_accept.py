"""One ``Accept`` parser (``proxy/policy/render/accept.py``) for the renderings and the catalog."""

from __future__ import annotations

import pytest

from proxy.config.choices import Rendering
from proxy.edge.catalog import wants_html
from proxy.policy.render.accept import MAX_RANGES, MediaRange, media_ranges
from proxy.policy.render.negotiation import negotiate

#: Tricky headers (q-values, wildcards, parameters, quoted commas, case, equal q) and what each
#: caller chose from them before the two parsers became one: the catalog's HTML-or-JSON, and
#: the rendering with ``json`` and with ``text`` as the route's default.
CHOICES = [
    (None, False, Rendering.JSON, Rendering.TEXT),
    ("", False, Rendering.JSON, Rendering.TEXT),
    ("   ", False, Rendering.JSON, Rendering.TEXT),
    ("*/*", False, Rendering.JSON, Rendering.TEXT),
    ("text/html", True, Rendering.JSON, Rendering.TEXT),
    ("application/json", False, Rendering.JSON, Rendering.JSON),
    (
        "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
        True,
        Rendering.XML,
        Rendering.XML,
    ),
    ("application/json, text/html", False, Rendering.JSON, Rendering.JSON),
    ("text/html, application/json", False, Rendering.JSON, Rendering.JSON),
    ("text/html;q=0.5, application/json;q=0.5", False, Rendering.JSON, Rendering.JSON),
    ("text/html;q=0.9, application/json;q=0.8", True, Rendering.JSON, Rendering.JSON),
    ("text/html;q=0, */*", False, Rendering.JSON, Rendering.TEXT),
    ("text/*;q=0.3, application/json;q=0.2", True, Rendering.TEXT, Rendering.TEXT),
    ("text/*, application/*", False, Rendering.JSON, Rendering.TEXT),
    ("application/*;q=0.7, text/html;q=0.6", False, Rendering.JSON, Rendering.JSON),
    (
        'text/html;charset="utf-8,latin1";q=0.4, application/json;q=0.3',
        True,
        Rendering.JSON,
        Rendering.JSON,
    ),
    ("TEXT/HTML;Q=0.8, Application/JSON;q=0.9", False, Rendering.JSON, Rendering.JSON),
    ("text/plain, text/markdown;q=0.9", False, Rendering.TEXT, Rendering.TEXT),
    (
        "application/problem+json, application/json;q=0.9",
        False,
        Rendering.PROBLEM,
        Rendering.PROBLEM,
    ),
    (
        "application/xml;q=0.5, text/xml;q=0.6, application/json;q=0.4",
        False,
        Rendering.XML,
        Rendering.XML,
    ),
    ("text/markdown;q=1.0, */*;q=0.1", False, Rendering.MARKDOWN, Rendering.MARKDOWN),
    ("*/*;q=0.1, text/html;q=0.2", True, Rendering.JSON, Rendering.TEXT),
    ("application/json;q=0, text/plain;q=0", False, Rendering.JSON, Rendering.TEXT),
    ("text/html;level=1;q=0.7, application/json;q=0.7", False, Rendering.JSON, Rendering.JSON),
    ("application/json;q=.5, text/html;q=0.50", False, Rendering.JSON, Rendering.JSON),
    ("text/html;q=1., application/json;q=1", False, Rendering.JSON, Rendering.JSON),
    ("image/png, text/*;q=0.4", True, Rendering.TEXT, Rendering.TEXT),
    ("application/json;q=0.001, text/html;q=0.001", False, Rendering.JSON, Rendering.JSON),
]


@pytest.mark.parametrize(("accept", "html", "with_json", "with_text"), CHOICES)
def test_both_callers_choose_as_before(
    accept: str | None, html: bool, with_json: Rendering, with_text: Rendering
) -> None:
    """The catalog and the renderings read the same header through one parser, and each makes
    the choice it made with its own parser."""
    assert wants_html(accept) is html
    assert negotiate(accept, Rendering.JSON) is with_json
    assert negotiate(accept, Rendering.TEXT) is with_text


def test_a_range_is_read_once_the_same_way() -> None:
    """Case, whitespace, a bare ``*``, parameters before and after ``q`` and quoted commas."""
    header = ' TEXT/Html ; level=1 ; Q=0.5 ; ext=1, *, a/b;x="1,2";q=.25, bad, c/d;q=2'
    assert media_ranges(header) == (
        MediaRange("text", "html", 0.5),
        MediaRange("*", "*", 1.0),
        MediaRange("a", "b", 0.25),
    )


def test_a_hostile_header_is_read_only_so_far() -> None:
    """At most ``MAX_RANGES`` ranges are read, however many the header has."""
    assert len(media_ranges(", ".join(["a/b"] * (MAX_RANGES * 10)))) == MAX_RANGES
