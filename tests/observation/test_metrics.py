"""Metrics: cached label children count exactly what ``labels()`` each time counted."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from proxy.observation import metrics as metrics_module
from proxy.observation.metrics import Metrics
from proxy.policy.envelope.model import Action, Category, Envelope, Severity


def _envelope(code: str = "upstream.internal", status: int | None = 500) -> Envelope:
    return Envelope(
        code=code,
        message="The upstream service failed.",
        category=Category.INTERNAL,
        severity=Severity.FATAL,
        retryable=False,
        action=Action.REPORT_BUG,
        hint="Report it.",
        request_id="req_1",
        upstream_status=status,
        rule="spring.internal",
    )


def _value(registry: CollectorRegistry, name: str, labels: dict[str, str]) -> float | None:
    return registry.get_sample_value(name, labels)


def test_envelope_counts_every_family_with_cached_children() -> None:
    """The same envelope twice counts twice in errors, actions and (fallback) unmatched."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    for _ in range(2):
        metrics.envelope("default", _envelope(), fallback=True, protocol="http")
    errors = {
        "code": "upstream.internal",
        "category": "internal",
        "route": "default",
        "upstream_status": "500",
        "rule": "spring.internal",
        "protocol": "http",
    }
    assert _value(registry, "mend_errors_total", errors) == 2
    assert (
        _value(registry, "mend_error_actions_total", {"route": "default", "action": "report_bug"})
        == 2
    )
    unmatched = {"route": "default", "upstream_status": "500"}
    assert _value(registry, "mend_unmatched_errors_total", unmatched) == 2


def test_envelope_without_fallback_leaves_unmatched_alone() -> None:
    """A rule's own match never creates an unmatched series; no status is labelled "none"."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.envelope("default", _envelope(status=None), fallback=False)
    assert (
        _value(
            registry, "mend_unmatched_errors_total", {"route": "default", "upstream_status": "none"}
        )
        is None
    )
    assert (
        _value(
            registry,
            "mend_errors_total",
            {
                "code": "upstream.internal",
                "category": "internal",
                "route": "default",
                "upstream_status": "none",
                "rule": "spring.internal",
                "protocol": "http",
            },
        )
        == 1
    )


def test_exemplar_names_the_request_and_trace() -> None:
    """The cached child still carries the request id (and trace id) as its exemplar."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.envelope("default", _envelope(), fallback=False, trace_id="a" * 32)
    samples = [s for m in registry.collect() if m.name == "mend_errors" for s in m.samples]
    exemplar = next(s.exemplar for s in samples if s.name == "mend_errors_total")
    assert exemplar is not None
    assert exemplar.labels == {"request_id": "req_1", "trace_id": "a" * 32}


def test_redacted_counts_each_kind() -> None:
    """Each kind counts once per mention, through its cached child."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.redacted(["secret", "path"])
    metrics.redacted(["secret"])
    assert _value(registry, "mend_redactions_total", {"kind": "secret"}) == 2
    assert _value(registry, "mend_redactions_total", {"kind": "path"}) == 1


def test_children_tables_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``CHILDREN_MAX`` label sets the table starts again; counts are unaffected."""
    monkeypatch.setattr(metrics_module, "CHILDREN_MAX", 2)
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    for code in ("a.one", "a.two", "a.three", "a.one"):
        metrics.envelope("default", _envelope(code), fallback=False)
        metrics.redacted([code])
    assert len(metrics._envelopes) <= 2
    assert len(metrics._redactions) <= 2
    labels = {
        "code": "a.one",
        "category": "internal",
        "route": "default",
        "upstream_status": "500",
        "rule": "spring.internal",
        "protocol": "http",
    }
    assert _value(registry, "mend_errors_total", labels) == 2
    assert _value(registry, "mend_redactions_total", {"kind": "a.one"}) == 2
