"""Agent frameworks whose own function tools call a failing REST API with an HTTP client, with
scripted models (no LLM): what the model reads through mend is never worse than what it reads
direct (CONTRACT §6), as for MCP tools (``tests/agents/test_agents.py``).

pydantic-ai (``tools=``, httpx), openai-agents (``function_tool``, requests) and langgraph's
``ToolNode`` (langchain ``@tool``, httpx), each in its own virtualenv, call the REST app
(``tests/agents/rest_app.py``: 404, 409, two FastAPI 422s, 429 with ``Retry-After``, 503, a 500
with a traceback and a planted password) with tools written the two ways people write them
(``tests/agents/runners/http_tools.py``: ``return r.text``, or ``r.raise_for_status()`` and the
exception's text), once direct and once through a ``mend run --upstream`` of their own. The facts
each failure must keep and the advice it must never give are data
(``tests/agents/rest_cases.yaml``). The matrix is recorded as JSON and summed up at the end.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.agents.harness import (
    Case,
    Reading,
    ended_on_exception,
    facts_in,
    leaked,
    misdirections_in,
)
from tests.agents.rest_tools import REST_FRAMEWORKS, RestMatrix, load_rest_cases
from tests.agents.runners.http_tools import tools

pytestmark = pytest.mark.slow

CASES, LEAKS = load_rest_cases()
BY_CASE = pytest.mark.parametrize("case", CASES, ids=[c.key for c in CASES])
BY_FRAMEWORK = pytest.mark.parametrize("framework", list(REST_FRAMEWORKS))


def shown(direct: Reading, proxied: Reading) -> str:
    """Both readings, for a failure's message."""
    return (
        f"\n--- direct (raised: {direct.raised}):\n{direct.model_read}"
        f"\n--- through mend (raised: {proxied.raised}):\n{proxied.model_read}"
    )


def pair(matrix: RestMatrix, framework: str, case: Case) -> tuple[Reading, Reading]:
    return matrix.reading(framework, case, "direct"), matrix.reading(framework, case, "mend")


def on_the_wire(app: str, case: Case) -> str:
    """The whole exchange of the case's call, direct: request line, status line, headers, body."""
    tool = next(t for t in tools(app, "response") if t.__name__ == case.tool)
    response: Any = tool(**case.arguments)
    assert isinstance(response, httpx.Response)
    assert response.is_error, response.text
    head = [
        f"{response.request.method} {response.request.url}",
        f"HTTP/1.1 {response.status_code} {response.reason_phrase}",
        *(f"{name}: {value}" for name, value in response.headers.items()),
    ]
    return "\n".join(head) + "\n\n" + response.text


@BY_CASE
def test_the_api_states_every_declared_fact(rest_matrix: RestMatrix, case: Case) -> None:
    """The table is true to the REST app: each fact declared for a case is in its answer on the
    wire (or in the URL the tool called), and the failure is a failure."""
    wire = on_the_wire(rest_matrix.app, case)
    assert facts_in(case, wire) == set(case.facts), wire


@BY_FRAMEWORK
@BY_CASE
def test_no_fact_the_model_read_direct_is_lost_through_mend(
    rest_matrix: RestMatrix, framework: str, case: Case
) -> None:
    """Every fact the direct text carried (the cause, a wait, a field, a limit, an identifier
    the model sent) is in the text the model reads through mend."""
    direct, proxied = pair(rest_matrix, framework, case)
    lost = facts_in(case, direct.model_read) - facts_in(case, proxied.model_read)
    assert not lost, f"lost {sorted(lost)}" + shown(direct, proxied)


@BY_FRAMEWORK
@BY_CASE
def test_every_fact_on_the_wire_reaches_the_model_through_mend(
    rest_matrix: RestMatrix, framework: str, case: Case
) -> None:
    """Every fact the API's answer states that the tool's style can carry reaches the model
    through mend, also where the direct text lacks it (a status, a ``Retry-After`` header)."""
    direct, proxied = pair(rest_matrix, framework, case)
    missing = set(case.facts) - facts_in(case, proxied.model_read)
    assert not missing, f"missing {sorted(missing)}" + shown(direct, proxied)


@BY_FRAMEWORK
@BY_CASE
def test_nothing_the_model_reads_through_mend_misdirects(
    rest_matrix: RestMatrix, framework: str, case: Case
) -> None:
    """No advice through mend contradicts the failure: no field to change when the state
    forbids the action, no "do not retry" for a transient failure, no wait other than the one
    the answer gave, no bug report for the agent's own fix."""
    direct, proxied = pair(rest_matrix, framework, case)
    wrong = misdirections_in(case, proxied.model_read)
    assert not wrong, f"misdirects {wrong}" + shown(direct, proxied)


@BY_FRAMEWORK
@BY_CASE
def test_no_run_through_mend_ends_on_an_exception(
    rest_matrix: RestMatrix, framework: str, case: Case
) -> None:
    """Through mend the failure reaches the model as the tool's result or the exception's text
    the framework hands it: the run never ends on an exception."""
    direct, proxied = pair(rest_matrix, framework, case)
    assert not ended_on_exception(REST_FRAMEWORKS[framework], proxied), shown(direct, proxied)


@BY_FRAMEWORK
@BY_CASE
def test_nothing_planted_reaches_the_model_through_mend(
    rest_matrix: RestMatrix, framework: str, case: Case
) -> None:
    """No password, internal host, marker or traceback planted in a failure reaches the model
    through mend."""
    direct, proxied = pair(rest_matrix, framework, case)
    assert not leaked(LEAKS, proxied.model_read), shown(direct, proxied)
