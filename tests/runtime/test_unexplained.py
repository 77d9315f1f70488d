"""What only a fallback explained, kept and turned into rules (issue 40 §1, §2, §4).

A real mend process in front of a real aiohttp API (``unexplained_upstream.py``) that fails in
ways no shipped pack knows; requests sent with urllib; ``mend suggest``, ``mend check`` and
``mend test`` run as the operator runs them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.hostile.procs import MendProcess, free_port, mend_process, module_server, wait_port
from tests.runtime.unexplained_upstream import PASSWORD, SECRET

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "an-admin-token-of-some-length"


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    """The API, as a process of its own, stopped by its PID."""
    with module_server("tests.runtime.unexplained_upstream", ROOT) as url:
        yield url


def _send(url: str, data: bytes | None = None, token: str | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=data)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _traffic(mend: MendProcess) -> None:
    """Three 422s of one shape, two 500 pages of another, one FastAPI 422 a pack explains."""
    base = f"http://127.0.0.1:{mend.port}"
    for _ in range(3):
        _send(f"{base}/orders", b'{"qty": 0}')
    for number in (17, 18):
        _send(f"{base}/invoices/{number}")
    _send(f"{base}/search?limit=500")


def _shapes(mend: MendProcess, token: str | None = None) -> list[dict[str, Any]]:
    status, body = _send(f"http://127.0.0.1:{mend.admin_port}/shapes", token=token)
    assert status == 200, body
    shapes: list[dict[str, Any]] = body["shapes"]
    return shapes


@contextmanager
def _mend(tmp: Path, upstream: str, **config: Any) -> Iterator[MendProcess]:
    routes = [{"name": "billing", "upstream": upstream}]
    with mend_process(tmp, {"watch_rules": False, "routes": routes, **config}) as mend:
        yield mend


def test_answers_only_a_fallback_explained_are_kept_by_shape(tmp_path: Path, upstream: str) -> None:
    """The 422s are one shape counted three times, the two pages one shape counted twice; the
    FastAPI 422 the fastapi pack explained is not kept."""
    with _mend(tmp_path, upstream) as mend:
        _traffic(mend)
        shapes = _shapes(mend)
    counted = {(s["shape"]["status"], s["shape"]["kind"]): s["count"] for s in shapes}
    assert counted == {(422, "json"): 3, (500, "html"): 2}
    page = next(s for s in shapes if s["shape"]["kind"] == "html")
    assert page["shape"]["structure"] == ["Invoice <n> could not be rendered"]
    assert page["rule"] == "fallback.500"


def test_no_planted_secret_reaches_shapes_or_proposals(tmp_path: Path, upstream: str) -> None:
    """The samples are masked as the log masks bodies: the planted token and password appear
    in no shape and no proposal."""
    with _mend(tmp_path, upstream) as mend:
        _traffic(mend)
        admin = f"http://127.0.0.1:{mend.admin_port}"
        answers = [_send(f"{admin}/shapes"), _send(f"{admin}/suggest")]
    text = json.dumps(answers)
    assert "E_QTY_RANGE" in text  # the samples are there
    assert SECRET not in text
    assert PASSWORD not in text


def test_shapes_and_proposals_need_the_admin_token_when_one_is_set(
    tmp_path: Path, upstream: str
) -> None:
    """With ``admin_token`` set, ``/shapes`` and ``/suggest`` answer 401 without it."""
    with _mend(tmp_path, upstream, admin_token=TOKEN) as mend:
        _traffic(mend)
        admin = f"http://127.0.0.1:{mend.admin_port}"
        refused = [_send(f"{admin}/{path}")[0] for path in ("shapes", "suggest")]
        shapes = _shapes(mend, token=TOKEN)
    assert refused == [401, 401]
    assert len(shapes) == 2


def _operator(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "proxy", *args]
    return subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )


def test_a_proposal_passes_check_and_test_and_once_loaded_explains_the_answer(
    tmp_path: Path, upstream: str
) -> None:
    """``mend suggest --out`` writes a rule and its cases per shape; both pass ``mend check``
    and ``mend test``; copied into the rule directory and reloaded, the next 422 gets the
    proposed rule's envelope, whose message and field are the upstream's own."""
    proposed, rules = tmp_path / "proposed", tmp_path / "rules"
    rules.mkdir()
    with _mend(tmp_path, upstream, rules=[str(rules)]) as mend:
        _traffic(mend)
        admin = f"127.0.0.1:{mend.admin_port}"
        wrote = _operator("suggest", "--admin", admin, "--out", str(proposed))
        assert wrote.returncode == 0, wrote.stderr
        checked = _operator("check", str(proposed))
        tested = _operator("test", "--rules", str(proposed), str(proposed / "tests"))
        assert (checked.returncode, tested.returncode) == (0, 0), checked.stdout + tested.stdout
        for file in proposed.glob("*.yaml"):
            shutil.copy(file, rules)
        reloaded = _send(f"http://{admin}/-/reload", b"")
        assert reloaded[0] == 200, reloaded
        _, envelope = _send(f"http://127.0.0.1:{mend.port}/orders", b'{"qty": 0}')
    error = envelope["error"]
    assert error["rule"].startswith("suggested.billing_422_")
    assert (error["message"], error["field"]) == ("qty must be between 1 and 99", "/qty")
    assert "2 passed, 0 failed" in tested.stdout, tested.stdout


def test_mend_suggest_says_so_when_the_admin_port_cannot_be_asked() -> None:
    """A port nobody listens on: ``mend: error:`` naming it, exit 1."""
    port = free_port()
    result = _operator("suggest", "--admin", f"127.0.0.1:{port}")
    assert result.returncode == 1
    assert result.stderr.startswith(f"mend: error: cannot ask http://127.0.0.1:{port}/suggest")


def test_workers_share_their_shapes_on_the_admin_port(tmp_path: Path, upstream: str) -> None:
    """With two workers, the supervisor's ``/shapes`` counts what every worker saw (each
    request on a connection of its own, so the kernel spreads them)."""
    with _mend(tmp_path, upstream, workers=2) as mend:
        wait_port(mend.port)
        for _ in range(8):
            _send(f"http://127.0.0.1:{mend.port}/orders", b'{"qty": 0}')
        deadline = time.monotonic() + 15
        while True:
            counts = [s["count"] for s in _shapes(mend)]
            if counts == [8] or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    assert counts == [8]
