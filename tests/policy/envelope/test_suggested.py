"""Suggested values: one per field, the same at the top level, of the field's own type."""

from __future__ import annotations

from typing import Any

from proxy.policy.envelope.constraints import suggest
from proxy.policy.envelope.model import Envelope
from proxy.tools.ruletest.engines import Engines, replay

ENGINES = Engines()


def _fastapi(received: Any, bound: Any) -> Envelope:
    detail = {
        "type": "less_than_equal",
        "loc": ["body", "qty"],
        "msg": f"Input should be less than or equal to {bound}",
        "input": received,
        "ctx": {"le": bound},
    }
    request = {"method": "POST", "path": "/api/orders"}
    evaluation = replay(ENGINES, {"status": 422, "json": {"detail": [detail]}}, request)
    assert evaluation is not None
    return evaluation.envelope


def test_the_field_and_the_top_level_suggest_the_same_value() -> None:
    """FastAPI's 422 suggests its bound in invalid_fields[0] as well as at the top level."""
    env = _fastapi(12, 10)
    assert env.rule == "fastapi.validation"
    assert (env.suggested_value, env.invalid_fields[0].suggested_value) == (10, 10)


def test_an_integer_sent_is_suggested_an_integer() -> None:
    """A bound written 10.0 (pydantic's ctx of a float constraint) is suggested as 10 to an
    integer field, in the field and at the top level."""
    env = _fastapi(12, 10.0)
    suggested = (env.suggested_value, env.invalid_fields[0].suggested_value)
    assert suggested == (10, 10)
    assert all(type(value) is int for value in suggested), suggested


def test_a_fractional_bound_is_rounded_inside_for_an_integer() -> None:
    """An integer past a maximum of 9.5 is suggested 9 and below a minimum of 0.5, 1: inside
    the bound, of the field's type."""
    assert (suggest({"maximum": 9.5}, 12), suggest({"minimum": 0.5}, 0)) == (9, 1)


def test_a_float_sent_keeps_a_float_bound() -> None:
    """A float sent is a float field: 10.0 stays 10.0."""
    value = suggest({"maximum": 10.0}, 12.5)
    assert (value, type(value)) == (10.0, float)
