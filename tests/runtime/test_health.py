"""``/readyz`` follows the upstreams' health checks (issue 17 §8); ``/healthz`` stays liveness.

mend runs as a real process; the upstream is a real HTTP server whose health the test flips."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.hostile.procs import MendProcess, free_port, mend_process, raw_server, read_head

HEALTH = {"status": b"200 OK"}


async def flippable(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers /health with whatever status ``HEALTH`` holds now."""
    while True:
        await read_head(reader)
        writer.write(b"HTTP/1.1 %s\r\nContent-Length: 2\r\n\r\nok" % HEALTH["status"])
        await writer.drain()


def _get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _probed(body: dict[str, Any]) -> bool:
    """Every route /readyz names has been probed at least once (a route not checked yet counts as
    unready too, so a 503 alone does not say the probe has run)."""
    return all(entry["healthy"] is not None for entry in body.get("unhealthy", []))


def _until(mend: MendProcess, path: str, status: int, limit: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + limit
    while True:
        got, body = _get(f"http://127.0.0.1:{mend.admin_port}{path}")
        if got == status and _probed(body):
            return body
        assert time.monotonic() < deadline, (got, body)
        time.sleep(0.1)


def test_readyz_follows_the_upstream_health_check(tmp_path: Path) -> None:
    """Healthy: 200. The upstream answers 503: /readyz 503 naming the route, /healthz still 200.
    Healthy again: 200."""
    check = {"path": "/health", "interval_s": 0.2, "timeout_s": 1}
    with raw_server(flippable) as upstream:
        config = {
            "watch_rules": False,
            "routes": [
                {
                    "name": "api",
                    "upstream": f"http://127.0.0.1:{upstream.port}",
                    "health_check": check,
                },
            ],
        }
        with mend_process(tmp_path, config) as mend:
            _until(mend, "/readyz", 200)
            HEALTH["status"] = b"503 Service Unavailable"
            body = _until(mend, "/readyz", 503)
            assert body["unhealthy"] == [{"route": "api", "healthy": False, "reason": "status 503"}]
            assert _get(f"http://127.0.0.1:{mend.admin_port}/healthz")[0] == 200
            HEALTH["status"] = b"200 OK"
            _until(mend, "/readyz", 200)
    HEALTH["status"] = b"200 OK"


def test_a_dead_upstream_makes_mend_unready(tmp_path: Path) -> None:
    """A checked route whose upstream refuses connections is named in the 503; unchecked routes
    never make mend unready."""
    dead = free_port()
    config = {
        "watch_rules": False,
        "routes": [
            {
                "name": "dead",
                "prefix": "/dead",
                "upstream": f"http://127.0.0.1:{dead}",
                "health_check": {"path": "/", "interval_s": 0.2},
            },
            {"name": "unchecked", "upstream": f"http://127.0.0.1:{free_port()}"},
        ],
    }
    with mend_process(tmp_path, config) as mend:
        body = _until(mend, "/readyz", 503)
        assert [entry["route"] for entry in body["unhealthy"]] == ["dead"]
        assert body["unhealthy"][0]["reason"] == (
            f"cannot connect to 127.0.0.1:{dead}: connection refused"
        )


def test_a_route_not_probed_yet_is_unready_and_says_so(tmp_path: Path) -> None:
    """Before its first probe has answered, a checked route makes /readyz 503 with the reason
    "not checked yet" and ``healthy: null`` (the probe here waits on an upstream that never
    answers, within a long timeout)."""
    with raw_server(_silent) as upstream:
        config = {
            "watch_rules": False,
            "routes": [
                {
                    "name": "slow",
                    "upstream": f"http://127.0.0.1:{upstream.port}",
                    "health_check": {"path": "/", "interval_s": 30, "timeout_s": 30},
                },
            ],
        }
        with mend_process(tmp_path, config) as mend:
            got, body = _get(f"http://127.0.0.1:{mend.admin_port}/readyz")
    assert got == 503
    assert body["unhealthy"] == [{"route": "slow", "healthy": None, "reason": "not checked yet"}]


async def _silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Reads the probe's head and never answers."""
    await read_head(reader)
    await asyncio.sleep(60)


def test_no_health_check_means_ready(tmp_path: Path) -> None:
    """Without any health_check, /readyz is 200 as before, whatever the upstream does."""
    config = {
        "watch_rules": False,
        "routes": [{"name": "a", "upstream": f"http://127.0.0.1:{free_port()}"}],
    }
    with mend_process(tmp_path, config) as mend:
        assert _get(f"http://127.0.0.1:{mend.admin_port}/readyz")[0] == 200
