"""RFC 6901 pointers from every spelling of a field location that upstreams use."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.policy.envelope import pointer as pointer_module
from proxy.policy.envelope.pointer import LOCATION_PREFIXES, located, to_pointer


@pytest.mark.parametrize(
    ("location", "pointer"),
    [
        (["body", "items", 0, "qty"], "/items/0/qty"),
        (["query", "limit"], "/limit"),
        (["body"], ""),  # the body as a whole
        ("body", "/body"),  # a field named body
        ("items.0.qty", "/items/0/qty"),
        ("items[0].qty", "/items/0/qty"),
        ("$.items[0].qty", "/items/0/qty"),
        ("/already/a/pointer", "/already/a/pointer"),
        ("#/age", "/age"),
        (("items.0.qty",), "/items/0/qty"),
        (("$.qty",), "/qty"),
        (("items", 0, "non_field_errors"), "/items/0"),
        (["a/b", "c~d"], "/a~1b/c~0d"),
        ("a.b.0.c", "/a/b/0/c"),
        ("a[0].b", "/a/0/b"),
        ("a/0/b", "/a/0/b"),
        ("photoUrls.0", "/photoUrls/0"),
        (["body", "tags", "0", "id"], "/tags/0/id"),
        (["query", "status", "0"], "/status/0"),
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


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ([True], [1]),
        ([1], [1.0]),
        ([1], ["1"]),
        (["body", "qty"], "body.qty"),
        ("a.b", ["a.b"]),
        (("body",), ["body"]),
    ],
)
def test_remembered_pointers_keep_different_locations_apart(first: Any, second: Any) -> None:
    """Remembering a location never answers for another one that compares equal to it."""
    pointer_module._POINTERS.clear()
    expected = pointer_module._located(second, pointer_module.LOCATION_PREFIXES)
    located(first)
    assert located(second) == expected
    assert located(second) == expected


def test_remembered_pointers_are_the_computed_ones_and_capped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A location read again gives the same pointer; the table stays under its cap, and long
    or unusual locations are not kept at all."""
    monkeypatch.setattr(pointer_module, "POINTERS_MAX", 8)
    pointer_module._POINTERS.clear()
    for n in range(50):
        value = ["body", "items", n, "qty"]
        assert to_pointer(value) == to_pointer(tuple(value)) == f"/items/{n}/qty"
        assert len(pointer_module._POINTERS) <= 8
    pointer_module._POINTERS.clear()
    to_pointer("x" * 1000)
    to_pointer(["a", {"b": 1}])
    to_pointer(["x" * 200, "y" * 100])  # 300 characters in all
    to_pointer(list(range(20)))  # 20 segments
    to_pointer(["a"], ["body"])  # a list of prefixes: not a key
    assert not pointer_module._POINTERS


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # Prism's sl-violations and validation[] location lists
        (["request", "body", "photoUrls", "0"], ("/photoUrls/0", "body")),
        (["request", "query", "state"], ("/state", "query")),
        (["request", "path", "petid"], ("/petid", "path")),
        (["request", "header", "api_key"], ("/api_key", "header")),
        (["body", "tags", "0", "id"], ("/tags/0/id", "body")),
        # a member named as a location, after the location (GitHub's pull request "body")
        (["request", "body", "body"], ("/body", "body")),
        (["request", "query", "query"], ("/query", "query")),
        ("body.body", ("/body", "body")),
        # FastAPI, Fastify, Laravel
        (["query", "limit"], ("/limit", "query")),
        ("querystring.limit", ("/limit", "query")),
        ("params.id", ("/id", "path")),
        ("headers.x-key", ("/x-key", "header")),
        ("body/items/0/qty", ("/items/0/qty", "body")),
        # no location said
        ("items.0.qty", ("/items/0/qty", None)),
        ("/items/0/qty", ("/items/0/qty", None)),  # a pointer is kept as sent
        ("/body/qty", ("/body/qty", None)),
        (["body"], ("", "body")),  # Prism's "Request body must be object": the whole body
        (["request", "query"], ("", "query")),
        (["request"], None),  # the request as a whole
        ("body", ("/body", None)),  # a property named body, not the body itself
        (["items"], ("/items", None)),
        (("query",), ("/query", None)),  # an object's key flattened: a field named query
    ],
)
def test_locations_say_where_the_field_is(value: object, expected: tuple[str, str] | None) -> None:
    """A leading location segment is stripped from the pointer and becomes its location."""
    assert located(value, ("request", *LOCATION_PREFIXES)) == expected


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        ("Request query must have required property 'status'", ("/status", "query")),
        ("Request header must have required property 'api_key'", ("/api_key", "header")),
        ("Request body must have required property 'photoUrls'", ("/photoUrls", "body")),
        (
            "Request body property category must have required property 'name'",
            ("/category/name", "body"),
        ),
        (
            "Request body property tags.0 must have required property 'name'",
            ("/tags/0/name", "body"),
        ),
        ("body must have required property 'sku'", ("/sku", "body")),
        ("body/items/0 must have required property 'sku'", ("/items/0/sku", "body")),
        ("querystring/limit must be >= 1", ("/limit", "query")),
        ("must have required property 'name'", ("/name", None)),
        ("items.0 must have required property 'name'", ("/items/0/name", None)),
    ],
)
def test_required_properties_are_named_under_their_object(
    sentence: str, expected: tuple[str, str | None]
) -> None:
    """ajv's and Prism's "must have required property 'x'" name ``x`` inside the object the
    message is about, where the message says that object is."""
    assert located(sentence) == expected
