"""Agent frameworks driving failing tools through mend with scripted models (no LLM): what the
model reads through mend is never worse than what it reads direct (docs/contract.md §6).

MCP tools: six frameworks (pydantic-ai, openai-agents, langchain-mcp-adapters with langgraph's
``ToolNode``, google-adk, llama-index-tools-mcp, the fastmcp ``Client``), each in its own
virtualenv, call tools that fail in many ways on an SDK 2.x server, an SDK 1.x server and
FastMCP's OpenAPI tools over a failing REST app (``tests/agents/servers.py``; facts and
misdirections in ``cases.yaml``). REST function tools: pydantic-ai, openai-agents and langgraph
call the REST app (``rest_app.py``) with httpx or requests, written the two ways people write
them (``runners/http_tools.py``: ``return r.text``, or ``raise_for_status()`` and the exception's
text; ``rest_cases.yaml``). Each runs once direct and once through a ``mend run`` of its own; the
same five properties hold of both matrices, which are recorded as JSON and summed up at the end.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.agents.harness import (
    FRAMEWORKS,
    Case,
    Framework,
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
from tests.agents.rest_tools import REST_FRAMEWORKS, RestMatrix, load_rest_cases
from tests.agents.runners.http_tools import tools

pytestmark = pytest.mark.slow

CASES, LEAKS = load_cases()
REST_CASES, REST_LEAKS = load_rest_cases()
CHECKS = load_regex_checks()
BY_CASE = pytest.mark.parametrize("case", CASES, ids=[c.key for c in CASES])
BY_REST_CASE = pytest.mark.parametrize("case", REST_CASES, ids=[c.key for c in REST_CASES])


@dataclass(frozen=True)
class Subject:
    """One framework on one failing case, in one of the two matrices."""

    matrix: str  # the fixture holding the readings
    framework: Framework
    name: str
    case: Case
    leaks: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{'mcp' if self.matrix == 'matrix' else 'rest'}-{self.case.key}-{self.name}"


SUBJECTS = [
    *(Subject("matrix", f, n, c, tuple(LEAKS)) for c in CASES for n, f in FRAMEWORKS.items()),
    *(
        Subject("rest_matrix", f, n, c, tuple(REST_LEAKS))
        for c in REST_CASES
        for n, f in REST_FRAMEWORKS.items()
    ),
]
BY_SUBJECT = pytest.mark.parametrize("subject", SUBJECTS, ids=[s.id for s in SUBJECTS])


def readings(request: pytest.FixtureRequest, subject: Subject) -> tuple[Reading, Reading]:
    """The subject's readings, direct and through mend."""
    taken: Matrix | RestMatrix = request.getfixturevalue(subject.matrix)
    direct = taken.reading(subject.name, subject.case, "direct")
    return direct, taken.reading(subject.name, subject.case, "mend")


def shown(direct: Reading, proxied: Reading) -> str:
    """Both readings, for a failure's message."""
    return (
        f"\n--- direct (raised: {direct.raised}):\n{direct.model_read}"
        f"\n--- through mend (raised: {proxied.raised}):\n{proxied.model_read}"
    )


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


@BY_REST_CASE
def test_the_api_states_every_declared_fact(rest_matrix: RestMatrix, case: Case) -> None:
    """The table is true to the REST app: each fact declared for a case is in its answer on the
    wire (or in the URL the tool called), and the failure is a failure."""
    wire = on_the_wire(rest_matrix.app, case)
    assert facts_in(case, wire) == set(case.facts), wire


@BY_SUBJECT
def test_no_fact_the_model_read_direct_is_lost_through_mend(
    request: pytest.FixtureRequest, subject: Subject
) -> None:
    """Every fact the direct text carried (the cause, a wait, a field, a limit, an identifier
    the model sent) is in the text the model reads through mend."""
    direct, proxied = readings(request, subject)
    case = subject.case
    lost = facts_in(case, direct.model_read) - facts_in(case, proxied.model_read)
    assert not lost, f"lost {sorted(lost)}" + shown(direct, proxied)


@BY_SUBJECT
def test_every_fact_on_the_wire_reaches_the_model_through_mend(
    request: pytest.FixtureRequest, subject: Subject
) -> None:
    """Every fact the tool's or API's own answer states (that the tool's style can carry)
    reaches the model through mend, also where the framework hands the model nothing of it
    direct (a JSON-RPC error, a ``Retry-After`` header)."""
    direct, proxied = readings(request, subject)
    missing = set(subject.case.facts) - facts_in(subject.case, proxied.model_read)
    assert not missing, f"missing {sorted(missing)}" + shown(direct, proxied)


@BY_SUBJECT
def test_nothing_the_model_reads_through_mend_misdirects(
    request: pytest.FixtureRequest, subject: Subject
) -> None:
    """No advice through mend contradicts the failure: no field to change when the state
    forbids the action, no "do not retry" for a transient failure, no wait other than the one
    the answer gave, no unknown tool to send again, no bug report for the agent's own fix."""
    direct, proxied = readings(request, subject)
    wrong = misdirections_in(subject.case, proxied.model_read)
    assert not wrong, f"misdirects {wrong}" + shown(direct, proxied)


@BY_SUBJECT
def test_no_run_through_mend_ends_on_an_exception(
    request: pytest.FixtureRequest, subject: Subject
) -> None:
    """Through mend the failure reaches the model as a tool result (or the exception's text the
    framework hands it): the run never ends on an exception (the fastmcp Client raises
    ``ToolError`` on every isError result by design, which is how it hands one over)."""
    direct, proxied = readings(request, subject)
    assert not ended_on_exception(subject.framework, proxied), shown(direct, proxied)


@BY_SUBJECT
def test_nothing_planted_reaches_the_model_through_mend(
    request: pytest.FixtureRequest, subject: Subject
) -> None:
    """No password, internal host, marker or traceback planted in a failure reaches the model
    through mend."""
    direct, proxied = readings(request, subject)
    assert not leaked(subject.leaks, proxied.model_read), shown(direct, proxied)
