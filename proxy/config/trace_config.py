"""Tracing resolved: the ``tracing:`` block and the standard ``OTEL_*`` variables, into one
``TraceConfig``.

The block's values win; the variables fill what it leaves out, as an SDK's explicit configuration
wins over its environment. ``None``: tracing is off. Making the tracer from it is the observation
floor's (``proxy/observation/tracing.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from proxy.config.otel import SAMPLERS, TracingError, TracingSettings, check_url

#: The one OTLP transport mend speaks (the SDK's ``opentelemetry-exporter-otlp-proto-http``).
PROTOCOL = "http/protobuf"
#: The collector's default OTLP/HTTP traces URL, for ``enabled: true`` with no endpoint.
DEFAULT_ENDPOINT = "http://localhost:4318/v1/traces"


@dataclass(frozen=True, slots=True)
class TraceConfig:
    """What the tracer is made with: the block and the variables, resolved and checked."""

    endpoint: str
    service_name: str | None  # None: OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES, else mend
    sampler: str
    sampler_arg: float | None
    resource_attributes: Mapping[str, str]
    headers: Mapping[str, str] | None  # None: the exporter reads OTEL_EXPORTER_OTLP_HEADERS
    #: which setting turned tracing on, for messages (``OTEL_EXPORTER_OTLP_ENDPOINT``)
    source: str


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


def _endpoint(block: TracingSettings, env: Mapping[str, str]) -> tuple[str | None, str]:
    """The traces URL and the setting it came from; ``None`` when none is set."""
    if block.traces_endpoint:
        return block.traces_endpoint, "tracing.traces_endpoint"
    if block.endpoint:
        return block.endpoint.rstrip("/") + "/v1/traces", "tracing.endpoint"
    if value := env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip():
        check_url(value, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        return value, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    if value := env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip():
        check_url(value, "OTEL_EXPORTER_OTLP_ENDPOINT")
        return value.rstrip("/") + "/v1/traces", "OTEL_EXPORTER_OTLP_ENDPOINT"
    return None, ""


def _sampler(block: TracingSettings, env: Mapping[str, str]) -> tuple[str, float | None]:
    name = block.sampler or env.get("OTEL_TRACES_SAMPLER", "").strip().lower()
    name = name or "parentbased_always_on"
    if name not in SAMPLERS:
        raise TracingError(f"OTEL_TRACES_SAMPLER={name!r} is not one of {', '.join(SAMPLERS)}")
    arg = block.sampler_arg
    raw = env.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
    if arg is None and raw and name.endswith("traceidratio"):
        try:
            arg = float(raw)
        except ValueError:
            raise TracingError(f"OTEL_TRACES_SAMPLER_ARG={raw!r} is not a number") from None
        if not 0.0 <= arg <= 1.0:
            raise TracingError(f"OTEL_TRACES_SAMPLER_ARG={raw!r} is not between 0 and 1")
    return name, arg


def resolve(block: TracingSettings, env: Mapping[str, str]) -> TraceConfig | None:
    """The tracer's configuration, or ``None`` when tracing is off. ``TracingError`` names a
    setting mend cannot honour (a protocol other than ``http/protobuf``, a bad sampler)."""
    if block.enabled is False or _truthy(env.get("OTEL_SDK_DISABLED")):
        return None
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none" and block.enabled is None:
        return None
    endpoint, source = _endpoint(block, env)
    if endpoint is None:
        if not block.enabled:
            return None
        endpoint, source = DEFAULT_ENDPOINT, "tracing.enabled"
    if exporter not in ("", "otlp", "none"):
        raise TracingError(f"OTEL_TRACES_EXPORTER={exporter!r}: mend exports otlp only")
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = env.get(name, "").strip()
        if block.protocol is None and protocol:
            if protocol != PROTOCOL:
                raise TracingError(f"{name}={protocol!r}: mend exports {PROTOCOL} only")
            break
    sampler, arg = _sampler(block, env)
    return TraceConfig(
        endpoint=endpoint,
        service_name=block.service_name,
        sampler=sampler,
        sampler_arg=arg,
        resource_attributes=dict(block.resource_attributes),
        headers=dict(block.headers) if block.headers else None,
        source=source,
    )
