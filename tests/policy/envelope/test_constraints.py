"""Allowed values and suggestions read from validation messages and contexts."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.policy.envelope import constraints
from proxy.policy.envelope.constraints import from_context, from_reason, normalise, suggest


@pytest.mark.parametrize(
    ("reason", "allowed"),
    [
        ("Ensure this value is greater than or equal to 1.", {"minimum": 1}),
        ("ensure this value is less than 100", {"exclusiveMaximum": 100}),
        ("Input should be greater than 0", {"exclusiveMinimum": 0}),
        ("must be less than or equal to 100", {"maximum": 100}),
        ("body/qty must be >= 1", {"minimum": 1}),
        ("-1 is less than the minimum of 1", {"minimum": 1}),
        ("qty must not be less than 1", {"minimum": 1}),
        ("qty must not be greater than 10", {"maximum": 10}),
        ("qty cannot exceed 5", {"maximum": 5}),
        ("The field Qty must be between 1 and 100.", {"minimum": 1, "maximum": 100}),
        ("size must be between 2 and 10", {"minLength": 2, "maxLength": 10}),
        ("must be between 1 and 3 items", {"minItems": 1, "maxItems": 3}),
        ("must be at least 10 characters", {"minLength": 10}),
        ("The name field must not be greater than 255 characters.", {"maxLength": 255}),
        ("is too long (maximum is 20 characters)", {"maxLength": 20}),
        ("Ensure this field has no more than 10 characters.", {"maxLength": 10}),
        ("qty must be a positive number", {"exclusiveMinimum": 0}),
        ("must be non-negative", {"minimum": 0}),
    ],
)
def test_bounds_from_messages(reason: str, allowed: dict[str, Any]) -> None:
    """Numeric and length bounds, including negated and two-sided phrasings."""
    assert from_reason(reason) == allowed


@pytest.mark.parametrize(
    ("reason", "values"),
    [
        ("must be one of: a, b", ["a", "b"]),
        ("status must be one of the following values: standard, express", ["standard", "express"]),
        ("Input should be 'standard' or 'express'", ["standard", "express"]),
        ("Input should be 'a', 'b' or 'c'", ["a", "b", "c"]),
        ("Invalid enum value. Expected 'a' | 'b', received 'c'", ["a", "b"]),
        ('"status" must be one of [standard, express]', ["standard", "express"]),
        ("value is not a valid enumeration member; permitted: 'a', 'b'", ["a", "b"]),
        ("'x' is not one of ['a', 'b']", ["a", "b"]),
    ],
)
def test_enums_from_messages(reason: str, values: list[str]) -> None:
    """Lists of allowed values, without the words around them or the value that was sent."""
    assert from_reason(reason) == {"enum": values}


@pytest.mark.parametrize(
    "reason",
    [
        "Field required",
        "This field may not be blank.",
        "Ensure that there are no more than 2 decimal places.",
        "Ensure that there are no more than 5 digits in total.",
        "at least 10 characters",  # a length, never a minimum of 1 read from "10"
    ],
)
def test_no_value_bound_where_none_is_named(reason: str) -> None:
    """Messages that name no value bound give no minimum/maximum."""
    allowed = from_reason(reason) or {}
    assert not {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} & set(allowed)


@pytest.mark.parametrize(
    ("context", "allowed"),
    [
        ({"gt": 0}, {"exclusiveMinimum": 0}),
        ({"le": 100}, {"maximum": 100}),
        ({"expected": "'a' or 'b'"}, {"enum": ["a", "b"]}),
        ("not a dict", None),
    ],
)
def test_context(context: Any, allowed: dict[str, Any] | None) -> None:
    """pydantic's ``ctx`` maps onto the same keywords."""
    assert from_context(context) == allowed


@pytest.mark.parametrize(
    ("allowed", "reason", "normalised"),
    [
        ({"exclusiveMinimum": 0}, "must be a positive integer", {"minimum": 1}),
        ({"exclusiveMaximum": 100}, "an int64 below 100", {"maximum": 99}),
        ({"exclusiveMinimum": 0}, "Input should be greater than 0", {"exclusiveMinimum": 0}),
    ],
)
def test_normalise(allowed: dict[str, Any], reason: str, normalised: dict[str, Any]) -> None:
    """Exclusive bounds become inclusive ones only of what the reason calls an integer."""
    assert normalise(allowed, reason) == normalised


@pytest.mark.parametrize(
    ("allowed", "received", "suggested"),
    [
        ({"exclusiveMinimum": 0}, -5, 1),
        ({"exclusiveMinimum": 0}, -0.5, None),
        ({"exclusiveMaximum": 10}, 12, 9),
        ({"minimum": 3}, 1, 3),
    ],
)
def test_suggest_steps_over_an_exclusive_bound_only_for_an_integer(
    allowed: dict[str, Any], received: Any, suggested: Any
) -> None:
    """``> 0`` suggests 1 for an integer sent, and no number for a float (any step guesses)."""
    assert suggest(allowed, received) == suggested


@pytest.mark.parametrize(
    ("allowed", "received", "suggested"),
    [
        ({"minimum": 1}, -1, 1),
        ({"maximum": 10}, 50, 10),
        ({"minimum": 1}, 5, None),
        ({"enum": ["standard", "express"]}, "expres", "express"),
        ({"enum": ["standard", "express"]}, "EXPRESS", "express"),
        ({"enum": ["a", "b"]}, None, "a"),
        (None, 3, None),
    ],
)
def test_suggest(allowed: dict[str, Any] | None, received: Any, suggested: Any) -> None:
    """The suggestion lies inside the constraint, as close to what was sent as possible."""
    assert suggest(allowed, received) == suggested


def test_remembered_reasons_are_fresh_copies_and_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A message read again gives what reading it gives, as a copy the caller may change; the
    table stays under its cap and an overlong message is never kept."""
    monkeypatch.setattr(constraints, "REASONS_MAX", 4)
    constraints._REASONS.clear()
    reason = "Input should be 'EUR', 'USD' or 'GBP'"
    first = constraints.from_reason(reason)
    assert first == constraints._from_reason(reason) == {"enum": ["EUR", "USD", "GBP"]}
    assert first is not None
    first["enum"].append("XYZ")
    first["minimum"] = 1
    assert constraints.from_reason(reason) == {"enum": ["EUR", "USD", "GBP"]}
    for n in range(20):
        assert constraints.from_reason(f"must be at least {n}") == {"minimum": n}
        assert len(constraints._REASONS) <= 4
    constraints._REASONS.clear()
    constraints.from_reason("must be at least 1 " + "x" * 2000)
    assert not constraints._REASONS
