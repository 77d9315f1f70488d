"""The official MCP conformance suite's server scenarios (it plays the MCP client) against two
SDKs' everything servers, direct and through mend: what passes direct passes through mend
(issue 38)."""

from __future__ import annotations

import pytest

from tests.conformance.suite import SERVER_SCENARIOS, SERVERS, Runs, assert_no_worse, listed

pytestmark = pytest.mark.slow


def test_server_scenarios_are_all_the_suites(conformance: Runs) -> None:
    """The server scenarios compared are every one the pinned suite lists."""
    assert listed("server") == list(SERVER_SCENARIOS)


@pytest.mark.parametrize(
    ("server", "scenario"),
    [pytest.param(s, c, id=f"{s}:{c}") for s in SERVERS for c in SERVER_SCENARIOS],
)
def test_server_scenario_through_mend_as_direct(
    conformance: Runs, server: str, scenario: str
) -> None:
    """A server scenario that passes direct passes through mend (and one that fails direct
    keeps every check it passed)."""
    assert_no_worse(conformance.server(server), scenario)
