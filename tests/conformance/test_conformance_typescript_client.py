"""The official MCP conformance suite's client scenarios (it plays the MCP server, and the
authorization server of ``auth/*``) with the TypeScript SDK's everything-client, direct and
through mend: what passes direct passes through mend (issue 38), but for one scenario whose
authorization server holds the MCP server's own address as the tokens' audience."""

from __future__ import annotations

import re

import pytest

from tests.conformance.suite import CLIENT_SCENARIOS, Runs, assert_no_worse, listed

pytestmark = pytest.mark.slow

#: Its authorization server checks that the token exchanged for the MCP server names that
#: server's own URL (``http://localhost:<its port>/mcp``) as its resource. Through a proxy the
#: client asks, as RFC 8707 says, for the URL it reached (mend's, which the metadata names), so
#: this check fails through any proxy by design; a deployment registers the public URL as the
#: audience (docs/protocols.md "Authorization": the audience check in a sidecar).
AUDIENCE_BOUND = "auth/cross-app-access-complete-flow"


def test_client_scenarios_are_all_the_suites(conformance: Runs) -> None:
    """The client scenarios compared are every one the pinned suite lists."""
    assert listed("client") == list(CLIENT_SCENARIOS)


@pytest.mark.parametrize("scenario", [s for s in CLIENT_SCENARIOS if s != AUDIENCE_BOUND])
def test_typescript_client_through_mend_as_direct(conformance: Runs, scenario: str) -> None:
    """A client scenario that passes direct with the TypeScript SDK's client passes through mend
    (and one that fails direct keeps every check it passed)."""
    assert_no_worse(conformance.client("typescript"), scenario)


def test_cross_app_access_differs_only_by_the_tokens_audience(conformance: Runs) -> None:
    """Through mend, cross-app access fails only at the authorization server's audience check:
    the client asked for a token for mend's URL, the scenario expected its server's own."""
    batch = conformance.client("typescript")
    if batch.worse(AUDIENCE_BOUND) is None:
        return  # as direct: nothing to explain
    worse = batch.worse(AUDIENCE_BOUND)
    assert worse is not None
    new = {str(check.get("id")): check for check in worse.new}
    assert set(new) == {"complete-flow-jwt-bearer"}, worse
    details = new["complete-flow-jwt-bearer"]["details"]
    assert re.fullmatch(r"http://localhost:\d+/mcp", details["jagResource"]), details
    assert re.fullmatch(r"http://localhost:\d+/mcp", details["expectedResource"]), details
    assert details["jagResource"] != details["expectedResource"]
    # the one check that needs the token just refused; every other check passes as direct
    assert worse.lost <= {"complete-flow-jwt-bearer", "valid-bearer-token"}, worse.lost
