"""The ``tracing:`` block of the config file: where and how OpenTelemetry traces are exported."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from yarl import URL

Sampler = Literal[
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
]
SAMPLERS: tuple[str, ...] = Sampler.__args__  # type: ignore[attr-defined]


class TracingError(ValueError):
    """Tracing is configured in a way mend cannot honour; the message names the setting."""


class TracingSettings(BaseModel):
    """The ``tracing:`` block (docs/operations.md "Traces"); every key also has an ``OTEL_*``
    variable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: ``false`` turns tracing off whatever the variables say; ``true`` turns it on (the
    #: collector's default endpoint when none is given); unset: on when an endpoint is set
    enabled: bool | None = None
    #: the collector's base URL, ``/v1/traces`` appended (``OTEL_EXPORTER_OTLP_ENDPOINT``)
    endpoint: str | None = None
    #: the full traces URL (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``); wins over ``endpoint``
    traces_endpoint: str | None = None
    #: the OTLP protocol (``OTEL_EXPORTER_OTLP_PROTOCOL``); only ``http/protobuf``
    protocol: Literal["http/protobuf"] | None = None
    #: ``service.name`` (``OTEL_SERVICE_NAME``); default ``mend``
    service_name: str | None = Field(None, min_length=1, max_length=256)
    #: which spans are kept (``OTEL_TRACES_SAMPLER``); default ``parentbased_always_on``
    sampler: Sampler | None = None
    #: the ratio of the ``traceidratio`` samplers (``OTEL_TRACES_SAMPLER_ARG``)
    sampler_arg: float | None = Field(None, ge=0.0, le=1.0)
    #: extra resource attributes (``OTEL_RESOURCE_ATTRIBUTES``)
    resource_attributes: dict[str, str] = Field(default_factory=dict, max_length=64)
    #: headers on every export request, e.g. a vendor's API key (``OTEL_EXPORTER_OTLP_HEADERS``)
    headers: dict[str, str] = Field(default_factory=dict, max_length=32)

    @field_validator("endpoint", "traces_endpoint")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None:
            check_url(value, "endpoint")
        return value


def check_url(value: str, name: str) -> None:
    url = URL(value)
    if url.scheme not in ("http", "https") or not url.host:
        raise TracingError(f"{name} {value!r} is not an http:// or https:// URL")
