"""The official MCP conformance suite's client scenarios with the Python SDK's (2.x) own
conformance client, direct and through mend: what passes direct passes through mend (issue 38)."""

from __future__ import annotations

import pytest

from tests.conformance.suite import CLIENT_SCENARIOS, Runs, assert_no_worse

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("scenario", CLIENT_SCENARIOS)
def test_python_client_through_mend_as_direct(conformance: Runs, scenario: str) -> None:
    """A client scenario that passes direct with the Python SDK's client passes through mend
    (and one that fails direct keeps every check it passed)."""
    assert_no_worse(conformance.client("python"), scenario)
