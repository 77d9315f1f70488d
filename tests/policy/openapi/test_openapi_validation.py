"""``validate_requests`` agreeing with the OpenAPI specification: 3.0's ``nullable`` (also beside
``oneOf``/``anyOf``/``allOf``), integers of any size, ``int32``/``int64`` ranges, empty required
query values, and the formats the specification names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from multidict import CIMultiDict, MultiDict

from proxy.policy.openapi.spec import Mount, Spec
from proxy.policy.openapi.violations import Violation

ROOT = Mount("/", False, "")


def _spec(tmp_path: Path, body: dict[str, Any], query: list[dict[str, Any]]) -> Spec:
    """A 3.0 document of one operation, ``POST /things``, with this body schema and query."""
    document = {
        "openapi": "3.0.3",
        "info": {"title": "t", "version": "1"},
        "paths": {
            "/things": {
                "post": {
                    "parameters": query,
                    "requestBody": {"content": {"application/json": {"schema": body}}},
                    "responses": {"200": {"description": "ok"}},
                }
            }
        },
        "components": {
            "schemas": {
                "User": {"type": "object", "properties": {"login": {"type": "string"}}},
            }
        },
    }
    path = tmp_path / "things.json"
    path.write_text(json.dumps(document))
    return Spec.load(path)


def _check(spec: Spec, body: bytes = b"", query: str = "") -> list[Violation]:
    located = spec.locate("POST", "/things", ROOT)
    assert located is not None
    assert located.match is not None
    params: MultiDict[str] = MultiDict(
        (name, value) for name, _, value in (p.partition("=") for p in query.split("&") if p)
    )
    content_type = "application/json" if body else ""
    return spec.checker.check(located.match, params, CIMultiDict(), content_type, body)


def _body_spec(tmp_path: Path, field: dict[str, Any]) -> Spec:
    return _spec(tmp_path, {"type": "object", "properties": {"v": field}}, [])


NULLABLE_BESIDE = {
    "oneOf": {"nullable": True, "oneOf": [{"type": "string"}, {"type": "integer"}]},
    "anyOf": {"nullable": True, "anyOf": [{"type": "string"}, {"type": "integer"}]},
    "allOf $ref": {"nullable": True, "allOf": [{"$ref": "#/components/schemas/User"}]},
    "enum": {"type": "string", "nullable": True, "enum": ["a", "b"]},
}


@pytest.mark.parametrize("field", NULLABLE_BESIDE.values(), ids=list(NULLABLE_BESIDE))
def test_null_is_valid_beside_combinators_when_nullable(tmp_path: Path, field: Any) -> None:
    """``nullable: true`` beside ``oneOf``/``anyOf``/``allOf``/``enum`` admits null (GitHub's
    ``nullable: true, allOf: [{$ref}]``)."""
    spec = _body_spec(tmp_path, field)
    assert _check(spec, b'{"v": null}') == []


@pytest.mark.parametrize("field", NULLABLE_BESIDE.values(), ids=list(NULLABLE_BESIDE))
def test_null_is_refused_beside_combinators_without_nullable(tmp_path: Path, field: Any) -> None:
    """The same schemas without ``nullable`` refuse null."""
    spec = _body_spec(tmp_path, {k: v for k, v in field.items() if k != "nullable"})
    assert [v.pointer for v in _check(spec, b'{"v": null}')] == ["/v"]


def test_the_fast_validator_agrees_on_nullable_beside_allof(tmp_path: Path) -> None:
    """jsonschema-rs itself says yes to null beside ``allOf`` (the valid request stays cheap)."""
    spec = _body_spec(tmp_path, NULLABLE_BESIDE["allOf $ref"])
    checked = spec.checker.operation("POST", "/things")
    assert checked.body is not None
    assert checked.body.fast is not None
    assert checked.body.fast.is_valid({"v": None})
    assert not checked.body.fast.is_valid({"v": 5})


def test_integers_past_64_bits_are_integers(tmp_path: Path) -> None:
    """A 30-digit integer is an integer, not a float."""
    spec = _body_spec(tmp_path, {"type": "integer"})
    assert _check(spec, b'{"v": 123456789012345678901234567890}') == []


def test_a_refused_big_integer_is_echoed_exactly(tmp_path: Path) -> None:
    """A big integer over the maximum is echoed back as sent, not as a float."""
    spec = _body_spec(tmp_path, {"type": "integer", "maximum": 10})
    found = _check(spec, b'{"v": 123456789012345678901234567890}')
    assert [v.received for v in found] == [123456789012345678901234567890]


@pytest.mark.parametrize(
    ("fmt", "value", "valid"),
    [
        ("int32", 2**31 - 1, True),
        ("int32", 2**31, False),
        ("int32", -(2**31) - 1, False),
        ("int64", 2**63 - 1, True),
        ("int64", 2**63, False),
    ],
)
def test_integer_formats_are_ranges(tmp_path: Path, fmt: str, value: int, valid: bool) -> None:
    """``format: int32`` / ``int64`` refuse what does not fit, in the body."""
    spec = _body_spec(tmp_path, {"type": "integer", "format": fmt})
    found = _check(spec, json.dumps({"v": value}).encode())
    assert (found == []) is valid


def test_integer_format_ranges_hold_in_the_query(tmp_path: Path) -> None:
    """A query parameter of ``format: int32`` refuses 2^31."""
    param = {"name": "n", "in": "query", "schema": {"type": "integer", "format": "int32"}}
    spec = _spec(tmp_path, {"type": "object"}, [param])
    assert [v.pointer for v in _check(spec, query=f"n={2**31}")] == ["/n"]
    assert _check(spec, query=f"n={2**31 - 1}") == []


@pytest.mark.parametrize(
    ("required", "allow_empty", "refused"),
    [(True, False, True), (True, True, False), (False, False, False)],
)
def test_an_empty_required_query_value_is_refused(
    tmp_path: Path, required: bool, allow_empty: bool, refused: bool
) -> None:
    """``?q=`` is no value for a required parameter, unless ``allowEmptyValue: true``."""
    param = {
        "name": "q",
        "in": "query",
        "required": required,
        "allowEmptyValue": allow_empty,
        "schema": {"type": "string"},
    }
    spec = _spec(tmp_path, {"type": "object"}, [param])
    found = _check(spec, query="q=")
    assert [v.pointer for v in found] == (["/q"] if refused else [])


@pytest.mark.parametrize(
    ("fmt", "value", "valid"),
    [
        ("byte", "aGVsbG8=", True),
        ("byte", "not base64!", False),
        ("date", "2026-11-27", True),
        ("date", "27/11/2026", False),
        ("date-time", "2026-11-27T12:00:00Z", True),
        ("date-time", "yesterday", False),
        ("binary", "\x00 anything", True),
        ("password", "hunter2", True),
    ],
)
def test_the_formats_the_specification_names(
    tmp_path: Path, fmt: str, value: str, valid: bool
) -> None:
    """byte, date, date-time are checked; binary and password take any string."""
    spec = _body_spec(tmp_path, {"type": "string", "format": fmt})
    found = _check(spec, json.dumps({"v": value}).encode())
    assert (found == []) is valid


def test_of_equally_literal_templates_the_one_with_the_method_is_found(tmp_path: Path) -> None:
    """``GET /a/x`` finds ``/a/{digest}`` (GET) though ``/a/{id}`` (DELETE) comes first, as
    GitHub's ``/users/{username}/attestations/...`` do."""
    ok = {"200": {"description": "ok"}}
    param = {"in": "path", "required": True, "schema": {"type": "string"}}
    document = {
        "openapi": "3.0.3",
        "info": {"title": "t", "version": "1"},
        "paths": {
            "/a/{id}": {"delete": {"parameters": [{**param, "name": "id"}], "responses": ok}},
            "/a/{digest}": {"get": {"parameters": [{**param, "name": "digest"}], "responses": ok}},
        },
    }
    path = tmp_path / "a.json"
    path.write_text(json.dumps(document))
    spec = Spec.load(path)
    for method, template in (("GET", "/a/{digest}"), ("DELETE", "/a/{id}")):
        located = spec.locate(method, "/a/x", ROOT)
        assert located is not None
        assert located.match is not None
        assert located.match.operation is not None
        assert located.match.operation.path == template


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("12", True),
        ("-1", True),
        ("\u0661\u0662", False),  # Arabic-Indic digits: Python's int reads them, no API does
        ("1_000", False),  # an underscore: Python's int reads it too
        ("12a", False),
        ("1.5", False),
    ],
)
def test_an_integer_path_parameter_is_checked_as_the_query_s(
    tmp_path: Path, value: str, valid: bool
) -> None:
    """``GET /pet/{petId}`` with an integer ``petId`` refuses what is no integer in a URL,
    whatever Python would read as one (issue 42: such a path parameter was forwarded)."""
    document = {
        "openapi": "3.0.3",
        "info": {"title": "t", "version": "1"},
        "paths": {
            "/pet/{petId}": {
                "get": {
                    "parameters": [
                        {
                            "name": "petId",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "integer", "format": "int64"},
                        }
                    ],
                    "responses": {"200": {"description": "ok"}},
                }
            }
        },
    }
    path = tmp_path / "pet.json"
    path.write_text(json.dumps(document))
    spec = Spec.load(path)
    located = spec.locate("GET", f"/pet/{value}", ROOT)
    assert located is not None
    assert located.match is not None
    found = spec.checker.check(located.match, MultiDict(), CIMultiDict(), "", b"")
    assert [(v.pointer, v.location) for v in found] == ([] if valid else [("/petId", "path")])


@pytest.mark.parametrize("value", ["nan", "inf", "-Infinity", "\u0661.\u0665"])
def test_a_number_query_parameter_is_a_finite_ascii_number(tmp_path: Path, value: str) -> None:
    """``nan``, ``inf`` and other scripts' digits are no number a URL carries: refused."""
    param = {"name": "x", "in": "query", "schema": {"type": "number"}}
    spec = _spec(tmp_path, {"type": "object"}, [param])
    assert [v.pointer for v in _check(spec, query=f"x={value}")] == ["/x"]
