"""What a document adds to the fields an upstream named: found where the upstream said they are
(a query parameter and a body property may share a name), with the document's enum, bounds,
format and example."""

from __future__ import annotations

import json
from typing import Any

import pytest
from multidict import CIMultiDict, MultiDict

from proxy.policy.envelope.model import Envelope, InvalidField
from proxy.policy.openapi.agent_request import Request
from proxy.policy.openapi.enrich import enrich
from proxy.policy.openapi.spec import Mount, Spec

ROOT = Mount("/", False, "")
DOCUMENT = {
    "openapi": "3.0.3",
    "info": {"title": "Issues", "version": "1"},
    "paths": {
        "/issues": {
            "post": {
                "operationId": "createIssue",
                "parameters": [
                    {
                        "name": "state",
                        "in": "query",
                        "schema": {"type": "string", "enum": ["open", "closed", "all"]},
                    },
                    {
                        "name": "per_page",
                        "in": "query",
                        "schema": {"type": "integer", "maximum": 100, "default": 30},
                    },
                    {"name": "X-Day", "in": "header", "schema": {"type": "string"}},
                ],
                "requestBody": {
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "properties": {
                                    "state": {"type": "string", "enum": ["draft", "final"]},
                                    "due": {
                                        "type": "string",
                                        "format": "date",
                                        "example": "2024-05-01",
                                    },
                                },
                            }
                        }
                    }
                },
                "responses": {"201": {"description": "created"}},
            }
        }
    },
}


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> Spec:
    path = tmp_path_factory.mktemp("doc") / "issues.json"
    path.write_text(json.dumps(DOCUMENT))
    return Spec.load(path)


def _enriched(spec: Spec, *fields: InvalidField, query: str = "") -> Envelope:
    envelope = Envelope(
        code="VALIDATION_FAILED",
        message="bad",
        category="validation",
        severity="error",
        retryable=False,
        action="fix_request",
        hint="h",
        request_id="req_1",
        upstream_status=422,
        rule="r",
        invalid_fields=fields,
    )
    pairs = [p.partition("=") for p in query.split("&") if p]
    params: MultiDict[str] = MultiDict((name, value) for name, _, value in pairs)
    request = Request("POST", "/issues", params, CIMultiDict())
    return enrich(envelope, spec, ROOT, request)


@pytest.mark.parametrize(
    ("location", "where", "enum"),
    [
        ("query", "query", ["open", "closed", "all"]),
        ("body", "body", ["draft", "final"]),
        (None, "body", ["draft", "final"]),  # unsaid: the body first, as before
    ],
)
def test_a_field_is_looked_up_where_the_upstream_said_it_is(
    spec: Spec, location: str | None, where: str, enum: list[str]
) -> None:
    field = InvalidField(field="/state", reason="bad", location=location)
    out = _enriched(spec, field, query="state=bogus").invalid_fields[0]
    assert (out.field, out.location, out.documented) == ("/state", where, True)
    assert out.allowed_values["enum"] == enum


def test_a_location_the_document_lacks_falls_back_to_where_it_has_the_field(spec: Spec) -> None:
    out = _enriched(spec, InvalidField(field="/due", reason="bad", location="query"))
    assert (out.invalid_fields[0].location, out.invalid_fields[0].documented) == ("body", True)


@pytest.mark.parametrize(
    ("field", "allowed", "suggested"),
    [
        ("/per_page", {"type": "integer", "maximum": 100, "default": None}, 30),
        ("/due", {"type": "string", "format": "date"}, "2024-05-01"),
    ],
)
def test_bounds_format_and_the_documents_example(
    spec: Spec, field: str, allowed: dict[str, Any], suggested: object
) -> None:
    """What the document says of the field, and its own example or default as the suggestion
    when nothing nearer what was sent can be said."""
    out = _enriched(spec, InvalidField(field=field, reason="is required")).invalid_fields[0]
    for key, value in allowed.items():
        if value is not None:
            assert out.allowed_values[key] == value
    assert out.suggested_value == suggested


def test_a_header_parameter_is_named_as_documented(spec: Spec) -> None:
    out = _enriched(spec, InvalidField(field="/x-day", reason="bad", location="header"))
    assert (out.invalid_fields[0].field, out.invalid_fields[0].location) == ("/X-Day", "header")
