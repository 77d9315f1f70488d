"""Templates read values and never run code."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.policy.rules.template import Template, TemplateError, compile_value, render_value

VARS: dict[str, Any] = {
    "qty": -1,
    "name": "Widget",
    "loc": ["body", "items", 0, "qty"],
    "wait": "7",
    "empty": "",
    "evil": "{{ secret }}",
    "secret": "s3cr3t",
    "go_field": "Items[0].Qty",
}


def lookup(name: str) -> Any:
    return VARS.get(name)


def identity(text: str) -> str:
    return text


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("plain text", "plain text"),
        ("Field {{ name }} is bad", "Field Widget is bad"),
        ("{{ qty }}", -1),
        ("{{ loc | pointer }}", "/items/0/qty"),
        ("{{ wait | ms }}", 7000),
        ("{{ wait | int }}", 7),
        ("{{ name | upper }}", "WIDGET"),
        ('{{ empty | default("none given") }}', "none given"),
        ('{{ missing | default("fallback") }}', "fallback"),
        ("a{{ missing }}b", "ab"),
        ("{{ loc | first }}", "body"),
        ("{{ go_field | camel | pointer }}", "/items/0/qty"),
    ],
)
def test_render(source: str, expected: Any) -> None:
    """Each template renders to the value its variables and filters give."""
    assert Template.parse(source).render(lookup, identity) == expected


def test_substituted_text_is_never_parsed_again() -> None:
    """A value that looks like template syntax stays literal text."""
    assert Template.parse("x {{ evil }}").render(lookup, identity) == "x {{ secret }}"


def test_substituted_values_are_scrubbed_but_literals_are_not() -> None:
    """The scrub function sees every substituted value and no literal text."""
    seen: list[str] = []

    def scrub(text: str) -> str:
        seen.append(text)
        return "[x]"

    assert Template.parse("Name: {{ name }}").render(lookup, scrub) == "Name: [x]"
    assert seen == ["Widget"]


@pytest.mark.parametrize(
    "source",
    [
        "{{ __import__('os') }}",
        "{{ name | system }}",
        "{{ name.__class__ }}x{{",
        "{{ a + b }}",
        "{{ name | default(unquoted) }}",
        "unbalanced }}",
    ],
)
def test_bad_templates_fail_at_load(source: str) -> None:
    """Anything but a plain name with known filters is refused when the rule loads."""
    with pytest.raises(TemplateError):
        Template.parse(source)


def test_nested_values_render_every_string() -> None:
    """compile_value/render_value handle dicts and lists of templates and literals."""
    compiled = compile_value({"id": "{{ qty }}", "tags": ["{{ name }}", "fixed"], "n": 3})
    assert render_value(compiled, lookup, identity) == {
        "id": -1,
        "tags": ["Widget", "fixed"],
        "n": 3,
    }


@pytest.mark.parametrize(
    ("value", "ms"),
    [
        ("7s", 7000),
        ("3.6s", 3600),
        ("20ms", 20),
        ("2 minutes", 120_000),
        ("1m30s", 90_000),
        ("00:00:59", 59_000),
        ("PT30S", 30_000),
        ("5", 5000),
        (7, 7000),
        ("1h", 3_600_000),
        ("soon", None),
        (None, None),
    ],
)
def test_duration_filter(value: Any, ms: int | None) -> None:
    """``duration`` reads the ways bodies write a wait, as milliseconds."""
    VARS["d"] = value
    try:
        assert Template.parse("{{ d | duration }}").render(lookup, identity) == ms
    finally:
        del VARS["d"]
