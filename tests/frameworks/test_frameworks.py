"""mend in front of real framework apps, scored against hand-written labels (cases.yaml).

Every app fails through its own machinery; one ``mend run`` with the shipped packs answers
every request. Each case is a test of its own (all its metrics), and each target of issue 16 is
one more test over all cases: category, retryable and retry_after 100 %, field pointers at
least 95 %, no invented pointer, no leak. The score table is printed at the end of the run.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.frameworks.scoring import Case, Outcome, failing, load_cases, rate, score
from tests.frameworks.stack import Stack

CASES = load_cases()
#: metric -> the share of scored cases that must pass it
TARGETS = {
    "category": 1.0,
    "retryable": 1.0,
    "retry_after": 1.0,
    "pointers": 0.95,
    "invented": 1.0,
    "leaks": 1.0,
}


def request_kwargs(case: Case) -> dict[str, Any]:
    """httpx arguments for the case's body."""
    r = case.request
    if r.json_body is not None:
        return {"json": r.json_body}
    if r.raw_json is not None:
        return {"content": r.raw_json.encode(), "headers": {"Content-Type": "application/json"}}
    if r.bytes is not None:
        return {"content": b"x" * r.bytes, "headers": {"Content-Type": "application/octet-stream"}}
    if r.json_bytes is not None:
        return {"json": {"pad": "x" * r.json_bytes}}
    return {}


def _send(stack: Stack, case: Case) -> httpx.Response:
    url = f"{stack.mend}/{case.app}{case.request.path}"
    with httpx.Client(timeout=15.0) as client:
        for _ in range(case.send - 1):
            client.request(case.request.method, url, **request_kwargs(case))
        return client.request(case.request.method, url, **request_kwargs(case))


def outcome_of(case: Case, stack: Stack, outcomes: dict[str, Outcome]) -> Outcome:
    """The case's scored answer through mend; sent once per run, then remembered."""
    if case.app in stack.skipped:
        pytest.skip(stack.skipped[case.app])
    if case.id not in outcomes:
        resp = _send(stack, case)
        outcomes[case.id] = score(case, resp.status_code, resp.headers.multi_items(), resp.content)
    return outcomes[case.id]


def _param(case: Case) -> Any:
    marks = [pytest.mark.xfail(reason=case.engine, strict=False)] if case.engine else []
    return pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_case(case: Case, stack: Stack, outcomes: dict[str, Outcome]) -> None:
    """One framework answer through mend: every metric matches the case's label."""
    got = outcome_of(case, stack, outcomes)
    assert not got.problems(), f"{case.id} (status {got.status}): " + "; ".join(got.problems())


@pytest.mark.parametrize("metric", list(TARGETS))
def test_target(metric: str, stack: Stack, outcomes: dict[str, Outcome]) -> None:
    """Issue 16's target for one metric, over every case; misses that only the engine-side part
    of the issue (another branch) fixes are an expected failure, named, until it lands."""
    every = [outcome_of(c, stack, outcomes) for c in CASES if c.app not in stack.skipped]
    ok, n = rate(every, metric)
    misses = failing(every, metric)
    # invented and leaks: no case may have any; the others: the share of cases that pass
    met = not misses if metric in ("invented", "leaks") else n == 0 or ok / n >= TARGETS[metric]
    if not met and all(o.case.engine for o in misses):
        pytest.xfail(f"{metric}: only engine-side cases miss: {[o.case.id for o in misses]}")
    assert met, f"{metric}: {ok}/{n}; misses: " + "; ".join(
        f"{o.case.id}: {o.problems()}" for o in misses
    )
