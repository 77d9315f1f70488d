"""The retry budget under load (issue 41 §3, docs/retries.md): retries stay a share of the
requests in flight, so an outage never multiplies the load on an upstream already failing.

A real mend process in front of the scriptable API (``retry_upstream.py``), which answers every
request 503 after 100 ms; 60 requests sent at once with ``httpx.AsyncClient``. The upstream
records when each try arrived and was answered, and which client request it belongs to
(``X-Test-Seq``), so a retry is a try of a request it saw before.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.hostile.procs import ROOT, MendProcess, mend_process, module_server
from tests.runtime.retry_upstream import counter, hits, script

#: requests sent at once
REQUESTS = 60
#: tries in all per request
ATTEMPTS = 5
#: milliseconds the upstream takes to answer each try
DELAY_MS = 100
PERCENT, MIN_CONCURRENT = 20, 3
BACK_OFF = {"base_ms": 10, "max_ms": 40}


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with module_server("tests.runtime.retry_upstream", ROOT) as url:
        yield url


@pytest.fixture(scope="module")
def mend(tmp_path_factory: pytest.TempPathFactory, upstream: str) -> Iterator[MendProcess]:
    """One worker (the budget is per process): ``load`` with the default budget, ``spent``
    with none at all."""

    def route(name: str, budget: dict[str, Any]) -> dict[str, Any]:
        retries = {"attempts": ATTEMPTS, "back_off": BACK_OFF, "budget": budget}
        return {
            "name": name,
            "prefix": f"/{name}",
            "upstream": upstream,
            "read_timeout": 10.0,
            "retries": retries,
        }

    budget = {"percent": PERCENT, "min_concurrent": MIN_CONCURRENT}
    config = {
        "watch_rules": False,
        "workers": 1,
        "routes": [route("load", budget), route("spent", {"percent": 0, "min_concurrent": 0})],
    }
    with mend_process(Path(tmp_path_factory.mktemp("budget")), config) as running:
        yield running


async def _burst(mend: MendProcess, path: str, count: int) -> list[httpx.Response]:
    """``count`` GETs of ``path`` at once, each with its own ``X-Test-Seq``."""
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=count)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        url = f"http://127.0.0.1:{mend.port}{path}"
        return await asyncio.gather(
            *(client.get(url, headers={"X-Test-Seq": str(n)}) for n in range(count))
        )


def _retries(seen: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tries of requests the upstream had seen before."""
    first: set[str] = set()
    again = []
    for hit in seen:
        if hit["seq"] in first:
            again.append(hit)
        first.add(hit["seq"])
    return again


def _most_at_once(tries: list[dict[str, Any]]) -> int:
    """The most of ``tries`` the upstream was serving at one moment."""
    return max(sum(1 for o in tries if o["t0"] <= t["t0"] < o["t1"]) for t in tries)


async def test_budget_bounds_retries_against_a_failing_upstream(
    mend: MendProcess, upstream: str
) -> None:
    """60 requests at once against an upstream answering 503 after 100 ms, 5 attempts each.

    Without a budget the upstream would get 60 retries at once, 4 times over (300 tries). The
    budget lets a route's retries in flight be at most max(min_concurrent, percent% of its
    requests in flight) = max(3, 20% of 60) = 12, a place held from the retry's decision until
    its try ended; since every try the upstream serves lies within its place, the upstream
    never serves more than 12 retries at once. Each retry holds its place at least the 100 ms
    the upstream takes, so over the burst's T seconds there are at most 12 * T / 0.1 retries;
    and each retry is at most one of the 4 a request may make. The retries the budget refused
    are counted as ``mend_retries_declined_total{why="budget"}``; every agent got an answer
    (the 503 envelope)."""
    path = f"/load/{uuid.uuid4().hex[:12]}"
    script(upstream, path, 1000, "503", delay_ms=DELAY_MS)
    declined = counter(mend, "mend_retries_declined_total", route="load", why="budget")
    started = time.monotonic()
    responses = await _burst(mend, path, REQUESTS)
    took = time.monotonic() - started
    assert [r.status_code for r in responses] == [503] * REQUESTS
    seen = hits(upstream, path)
    assert {h["seq"] for h in seen} == {str(n) for n in range(REQUESTS)}
    retries = _retries(seen)
    places = max(MIN_CONCURRENT, PERCENT * REQUESTS // 100)
    assert len(retries) > 0  # retries were made...
    assert _most_at_once(retries) <= places  # ...never more at once than the budget allows
    assert len(seen) - REQUESTS == len(retries) <= places * took / (DELAY_MS / 1000)
    assert len(retries) < REQUESTS * (ATTEMPTS - 1)
    assert counter(mend, "mend_retries_declined_total", route="load", why="budget") > declined


async def test_min_concurrent_lets_a_few_requests_retry(mend: MendProcess, upstream: str) -> None:
    """Two requests at once (20% of 2 is under one retry): min_concurrent (3) still lets both
    retry, so both get their 200 after a 503."""
    paths = [f"/load/{uuid.uuid4().hex[:12]}" for _ in range(2)]
    for path in paths:
        script(upstream, path, 1, "503", delay_ms=DELAY_MS)
    limits = httpx.Limits(max_connections=2)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        base = f"http://127.0.0.1:{mend.port}"
        responses = await asyncio.gather(*(client.get(f"{base}{path}") for path in paths))
    assert [r.status_code for r in responses] == [200, 200]
    assert [len(hits(upstream, path)) for path in paths] == [2, 2]


def test_an_empty_budget_declines_every_retry(mend: MendProcess, upstream: str) -> None:
    """``budget: {percent: 0, min_concurrent: 0}``: a 503 is never retried; the refusal is
    counted as the budget's."""
    path = f"/spent/{uuid.uuid4().hex[:12]}"
    script(upstream, path, 1, "503")
    declined = counter(mend, "mend_retries_declined_total", route="spent", why="budget")
    response = httpx.get(f"http://127.0.0.1:{mend.port}{path}", timeout=30)
    assert response.status_code == 503
    assert len(hits(upstream, path)) == 1
    assert counter(mend, "mend_retries_declined_total", route="spent", why="budget") == declined + 1
