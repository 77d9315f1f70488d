"""The failure of a request that its documented operation refuses (``validate_requests``)."""

from __future__ import annotations

from proxy.edge.failures import Refused
from proxy.policy.openapi.violations import Violation


class RequestInvalid(Refused):
    """Refused before the upstream: ``violations`` become the envelope's invalid fields."""

    rule, reason, status = "proxy.request_invalid", "request_invalid", 400
    #: the requests counter's outcome (``mend_requests_total{outcome="rejected"}``)
    outcome = "rejected"

    def __init__(self, violations: list[Violation]) -> None:
        super().__init__(f"{len(violations)} violations of the documented operation")
        self.violations = violations
