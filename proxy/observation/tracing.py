"""Tracing started: OpenTelemetry traces over OTLP/HTTP (protobuf), when configured.

mend exports traces when an endpoint is configured, by the ``tracing:`` block or by
``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
(``proxy/config/trace_config.py`` resolves them). Nothing configured: no tracer, and the SDK is
never imported (``proxy/observation/traces.py`` is, lazily, by ``start``). The span-making side
is ``proxy/observation/traces.py``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import TYPE_CHECKING

from proxy.config.otel import TracingError, TracingSettings
from proxy.config.trace_config import TraceConfig, resolve

if TYPE_CHECKING:
    from proxy.observation.traces import Tracer

#: The extra that brings the SDK and the exporter (``pip install 'mend[tracing]'``).
EXTRA_HINT = "pip install 'mend[tracing]'"


def available() -> bool:
    """Whether the SDK and the OTLP/HTTP exporter are installed (the ``tracing`` extra)."""
    names = ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")
    try:
        return all(importlib.util.find_spec(name) is not None for name in names)
    except ModuleNotFoundError:  # a parent package is missing
        return False


def check(block: TracingSettings, env: Mapping[str, str]) -> TraceConfig | None:
    """``resolve``, and ``TracingError`` when tracing is on but the extra is not installed."""
    config = resolve(block, env)
    if config is not None and not available():
        raise TracingError(
            f"tracing is configured ({config.source}) but the OpenTelemetry SDK is not "
            f"installed: {EXTRA_HINT}"
        )
    return config


def start(config: TraceConfig | None) -> Tracer | None:
    """The process's tracer (``None``: tracing off). Imports the SDK only here, in the process
    that serves: each worker makes its own after it is spawned."""
    if config is None:
        return None
    from proxy.observation.traces import Tracer  # noqa: PLC0415 - the SDK is imported only when tracing is on

    return Tracer.make(config)
