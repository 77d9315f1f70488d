"""RFC 6901 pointers from every spelling of a field location that upstreams use."""

from __future__ import annotations

import pytest

from proxy.policy.pointer import to_pointer


@pytest.mark.parametrize(
    ("location", "pointer"),
    [
        (["body", "items", 0, "qty"], "/items/0/qty"),
        (["query", "limit"], "/limit"),
        (["body"], "/body"),
        ("items.0.qty", "/items/0/qty"),
        ("items[0].qty", "/items/0/qty"),
        ("$.items[0].qty", "/items/0/qty"),
        ("/already/a/pointer", "/already/a/pointer"),
        ("#/age", "/age"),
        (("items.0.qty",), "/items/0/qty"),
        (("$.qty",), "/qty"),
        (("items", 0, "non_field_errors"), "/items/0"),
        (["a/b", "c~d"], "/a~1b/c~0d"),
    ],
)
def test_paths_become_pointers(location: object, pointer: str) -> None:
    """Lists, dotted, bracketed, JSONPath and fragment spellings all give the same pointer."""
    assert to_pointer(location) == pointer


@pytest.mark.parametrize(
    ("sentence", "pointer"),
    [
        ("qty must not be less than 1", "/qty"),
        ("items.0.qty must be a positive number", "/items/0/qty"),
        ('"qty" must be greater than or equal to 1', "/qty"),
        ("body/qty must be >= 1", "/qty"),
        ("body must have required property 'sku'", "/sku"),
        ("body/items/0 must have required property 'sku'", "/items/0/sku"),
        ("The items.0.qty field must be at least 1.", "/items/0/qty"),
        ("The field Qty must be between 1 and 100.", "/Qty"),
        (
            "Key: 'Order.Items[0].Qty' Error:Field validation for 'Qty' failed on the 'gte' tag",
            "/Items/0/Qty",
        ),
    ],
)
def test_field_named_in_a_sentence(sentence: str, pointer: str) -> None:
    """Frameworks that only say "qty must ..." still yield the field's pointer."""
    assert to_pointer(sentence) == pointer


@pytest.mark.parametrize(
    "location",
    [
        None,
        "",
        "$",
        "__all__",
        "non_field_errors",
        ("non_field_errors",),
        [],
        True,
        "Something went wrong somewhere",
    ],
)
def test_whole_request_is_no_field(location: object) -> None:
    """Locations that name the request as a whole (or nothing) give no pointer."""
    assert to_pointer(location) is None
