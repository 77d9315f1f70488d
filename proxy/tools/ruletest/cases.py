"""The case file's schema: a request, a route, a response, and what the envelope must hold."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from proxy.config.choices import ProtocolName
from proxy.config.redaction import RedactionSettings
from proxy.policy.envelope.model import Envelope

_ENVELOPE_KEYS = frozenset(Envelope.model_fields)


class CaseModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class RequestSpec(CaseModel):
    method: str = "GET"
    path: str = "/"
    #: the query string, without ``?`` (a GraphQL GET's ``query=``)
    query: str = ""
    headers: dict[str, str] = {}
    #: the request body, for a protocol to read (a JSON-RPC id, a GraphQL query): one of these
    json_: Any = Field(default=None, alias="json")
    body: str | None = None
    #: what the route's ``retry_safe:`` or an MCP tool's annotations (read-only, idempotent) say
    #: of sending the request again when it may have taken effect; ``None``: its method decides
    retry_safe: bool | None = None

    def raw_body(self) -> bytes | None:
        if "json_" in self.model_fields_set:
            return orjson.dumps(self.json_)
        return self.body.encode() if self.body is not None else None

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("a request path starts with '/'")
        return value


class RouteSpec(CaseModel):
    success_rules: tuple[str, ...] = ()


class ResponseSpec(CaseModel):
    status: int = Field(ge=100, le=599)
    headers: dict[str, str] = {}
    json_: Any = Field(default=None, alias="json")
    body: str | None = None

    @model_validator(mode="after")
    def _one_body(self) -> ResponseSpec:
        given = [n for n in ("json_", "body") if n in self.model_fields_set]
        if len(given) > 1:
            raise ValueError("give json: or body:, not both (neither: a response with no body)")
        return self

    def raw(self) -> tuple[bytes, dict[str, str]]:
        """The body bytes (none when neither ``json:`` nor ``body:`` is given) and headers; a
        ``json:`` body is sent as application/json by default."""
        headers = dict(self.headers)
        if "json_" in self.model_fields_set:
            if not any(k.lower() == "content-type" for k in headers):
                headers["Content-Type"] = "application/json"
            return orjson.dumps(self.json_), headers
        return (self.body or "").encode(), headers


Expectation = Literal["passthrough"] | dict[str, Any]
#: keys of ``expect`` about redaction rather than the envelope's fields
_REDACTION_KEYS = ("masked", "kept", "log_masked", "log_kept")


class RedactionExpectation(CaseModel):
    """Strings the agent must not / must see, and the operator's log must not / must hold."""

    masked: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    log_masked: tuple[str, ...] = ()
    log_kept: tuple[str, ...] = ()


def _redaction_part(data: Any) -> Any:
    """Move ``expect``'s redaction keys into ``expect_redaction`` (before validation)."""
    if not isinstance(data, dict) or not isinstance(data.get("expect"), dict):
        return data
    expect = dict(data["expect"])
    part = {key: expect.pop(key) for key in _REDACTION_KEYS if key in expect}
    if not part:
        return data
    return {**data, "expect": expect, "expect_redaction": part}


def _envelope_subset(value: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(value) - _ENVELOPE_KEYS)
    if unknown:
        raise ValueError(f"not envelope fields: {unknown}; expect one of the contract's")
    return value


class Case(CaseModel):
    name: str = Field(min_length=1)
    #: the protocol the agent speaks; ``http`` (the default) reads the response as plain HTTP
    protocol: ProtocolName = ProtocolName.HTTP
    request: RequestSpec = RequestSpec()
    route: RouteSpec = RouteSpec()
    rules: tuple[str, ...] = ()
    response: ResponseSpec | None = None
    #: instead of a response: a text to redact, as one string of an envelope and as the log
    redact: str | None = None
    #: redaction additions for this case (the config's ``redaction:`` keys)
    redaction: RedactionSettings = RedactionSettings()
    expect: Expectation
    #: ``expect``'s ``masked``/``kept``/``log_masked``/``log_kept``
    expect_redaction: RedactionExpectation | None = None
    #: one envelope subset per error unit, in order (a batch, a GraphQL errors list)
    expect_units: list[dict[str, Any]] | None = None
    #: a subset of the JSON document the agent receives (protocol answers)
    expect_response: Any = None

    @model_validator(mode="before")
    @classmethod
    def _split_expect(cls, data: Any) -> Any:
        return _redaction_part(data)

    @field_validator("expect")
    @classmethod
    def _expect(cls, value: Expectation) -> Expectation:
        return _envelope_subset(value) if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _what_is_tested(self) -> Case:
        if (self.response is None) == (self.redact is None):
            raise ValueError("give exactly one of response: or redact:")
        envelope = self.expect if isinstance(self.expect, dict) else None
        if self.redact is not None and (envelope or self.expect_redaction is None):
            raise ValueError("a redact: case expects masked/kept/log_masked/log_kept only")
        if envelope == {} and self.expect_redaction is None:
            raise ValueError("expect: names at least one envelope field, or is 'passthrough'")
        return self

    @field_validator("expect_units")
    @classmethod
    def _units(cls, value: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for item in value or ():
            _envelope_subset(item)
        return value


class CaseFile(CaseModel):
    cases: list[Case]


class Recorded(CaseModel):
    """One recorded response for ``--coverage``: a case without ``name``/``expect``."""

    name: str | None = None
    request: RequestSpec = RequestSpec()
    route: RouteSpec = RouteSpec()
    response: ResponseSpec
    deliberate: str | None = Field(default=None, min_length=1)


@dataclass(frozen=True, slots=True)
class LoadedCase:
    case: Case
    file: Path
    line: int

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"
