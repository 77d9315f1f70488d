"""Agent frameworks driving failing MCP tools through mend with scripted models (no LLM): what
the model reads through mend is never worse than what it reads direct (CONTRACT §6).

Six frameworks (pydantic-ai, openai-agents, langchain-mcp-adapters with langgraph's ``ToolNode``,
google-adk, llama-index-tools-mcp, the fastmcp ``Client``), each in its own virtualenv, call
tools that fail in many ways on an SDK 2.x server, an SDK 1.x server and FastMCP's OpenAPI tools
over a failing REST app (``tests/agents/servers.py``), once direct and once through a ``mend
run`` of their own. The facts each failure must keep and the advice it must never give are data
(``tests/agents/cases.yaml``). The matrix is recorded as JSON and summed up at the end of the run.
"""

from __future__ import annotations

import re

import pytest

from tests.agents.harness import (
    FRAMEWORKS,
    Case,
    Matrix,
    Reading,
    RegexCheck,
    ended_on_exception,
    facts_in,
    leaked,
    load_cases,
    load_regex_checks,
    misdirections_in,
)

pytestmark = pytest.mark.slow

CASES, LEAKS = load_cases()
CHECKS = load_regex_checks()
BY_CASE = pytest.mark.parametrize("case", CASES, ids=[c.key for c in CASES])
BY_FRAMEWORK = pytest.mark.parametrize("framework", list(FRAMEWORKS))


def shown(direct: Reading, proxied: Reading) -> str:
    """Both readings, for a failure's message."""
    return (
        f"\n--- direct (raised: {direct.raised}):\n{direct.model_read}"
        f"\n--- through mend (raised: {proxied.raised}):\n{proxied.model_read}"
    )


def pair(matrix: Matrix, framework: str, case: Case) -> tuple[Reading, Reading]:
    return matrix.reading(framework, case, "direct"), matrix.reading(framework, case, "mend")


@pytest.mark.parametrize("check", CHECKS, ids=[f"{c.case}-{c.misdirection}" for c in CHECKS])
def test_a_misdirection_regex_catches_what_it_names_and_spares_right_advice(
    check: RegexCheck,
) -> None:
    """Each checked misdirection regex matches the wrong advice issue 37 recorded, and none of
    the right advice."""
    case = next(c for c in CASES if c.id == check.case)
    regex = case.misdirections[check.misdirection]
    assert all(re.search(regex, text) for text in check.catches), regex
    assert not any(re.search(regex, text) for text in check.spares), regex


@BY_CASE
def test_the_server_states_every_declared_fact(matrix: Matrix, case: Case) -> None:
    """The table is true to the servers: each fact declared for a case is in what at least one
    framework read direct (or in the text of what it raised)."""
    direct = [matrix.reading(name, case, "direct") for name in FRAMEWORKS]
    texts = [f"{r.model_read}\n{r.raised or ''}" for r in direct]
    stated = set().union(*(facts_in(case, text) for text in texts))
    assert stated == set(case.facts), "\n".join(texts)


@BY_FRAMEWORK
@BY_CASE
def test_no_fact_the_model_read_direct_is_lost_through_mend(
    matrix: Matrix, framework: str, case: Case
) -> None:
    """Every fact the direct text carried (the cause, a wait, a field, a limit, an identifier
    the model sent) is in the text the model reads through mend."""
    direct, proxied = pair(matrix, framework, case)
    lost = facts_in(case, direct.model_read) - facts_in(case, proxied.model_read)
    assert not lost, f"lost {sorted(lost)}" + shown(direct, proxied)


@BY_FRAMEWORK
@BY_CASE
def test_every_fact_on_the_wire_reaches_the_model_through_mend(
    matrix: Matrix, framework: str, case: Case
) -> None:
    """Every fact the tool's own answer states reaches the model through mend, also where the
    framework hands the model nothing of it direct (a JSON-RPC error)."""
    direct, proxied = pair(matrix, framework, case)
    missing = set(case.facts) - facts_in(case, proxied.model_read)
    assert not missing, f"missing {sorted(missing)}" + shown(direct, proxied)


@BY_FRAMEWORK
@BY_CASE
def test_nothing_the_model_reads_through_mend_misdirects(
    matrix: Matrix, framework: str, case: Case
) -> None:
    """No advice through mend contradicts the failure: no field to change when the state
    forbids the action, no "do not retry" for a transient failure, no wait other than the one
    the answer gave, no unknown tool to send again, no bug report for the agent's own fix."""
    direct, proxied = pair(matrix, framework, case)
    wrong = misdirections_in(case, proxied.model_read)
    assert not wrong, f"misdirects {wrong}" + shown(direct, proxied)


@BY_FRAMEWORK
@BY_CASE
def test_no_run_through_mend_ends_on_an_exception(
    matrix: Matrix, framework: str, case: Case
) -> None:
    """Through mend the failure reaches the model as a tool result: the run never ends on an
    exception (the fastmcp Client raises ``ToolError`` on every isError result by design, which
    is how it hands one over; a JSON-RPC error is not)."""
    direct, proxied = pair(matrix, framework, case)
    assert not ended_on_exception(FRAMEWORKS[framework], proxied), shown(direct, proxied)


@BY_FRAMEWORK
@BY_CASE
def test_nothing_planted_reaches_the_model_through_mend(
    matrix: Matrix, framework: str, case: Case
) -> None:
    """No password, internal host, marker or traceback planted in a failure reaches the model
    through mend."""
    direct, proxied = pair(matrix, framework, case)
    assert not leaked(LEAKS, proxied.model_read), shown(direct, proxied)
