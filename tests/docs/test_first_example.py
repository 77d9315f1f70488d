"""README's first example, run as a user runs it: ``mend run --upstream`` (and then the config
file it shows) in front of a real API that refuses the order, then the two ``curl`` lines, on
free ports instead of 9000/8080/9464."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs.pages import ROOT, blocks

#: a FastAPI-shaped API on the port given: POST /api/orders refuses qty below 1
_UPSTREAM = textwrap.dedent(
    """
    import sys
    from aiohttp import web

    async def orders(request):
        body = await request.json()
        if body.get("qty", 0) < 1:
            detail = [{"type": "greater_than", "loc": ["body", "qty"],
                       "msg": "Input should be greater than 0", "input": body.get("qty"),
                       "ctx": {"gt": 0}}]
            return web.json_response({"detail": detail}, status=422)
        return web.json_response({"id": 7}, status=201)

    app = web.Application()
    app.router.add_post("/api/orders", orders)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
    """
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _wait(url: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.fixture
def ports() -> Iterator[dict[str, int]]:
    """The API on a free port, and two more for mend's listeners."""
    api = _free_port()
    proc = subprocess.Popen([sys.executable, "-c", _UPSTREAM, str(api)])
    try:
        deadline = time.monotonic() + 20
        while not _listening(api):
            assert time.monotonic() < deadline, "the example API did not start"
            time.sleep(0.1)
        yield {"9000": api, "8080": _free_port(), "9464": _free_port()}
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _first_example() -> list[str]:
    (block,) = [b for b in blocks(ROOT / "README.md") if "mend run --upstream" in b.text]
    return [line.split("  #", 1)[0].strip() for line in block.text.splitlines() if line.strip()]


def _serve_and_ask(run: str, ports: dict[str, int], cwd: Path) -> None:
    """Start mend with ``run`` (its listeners on the free ports), send README's order with its
    curl line and read its metrics line: the envelope and its count must be there."""
    _, order, metrics = _first_example()
    for default, port in ports.items():
        order, metrics = (c.replace(f":{default}", f":{port}") for c in (order, metrics))
    run += f" --listen 127.0.0.1:{ports['8080']} --admin-listen 127.0.0.1:{ports['9464']}"
    mend = subprocess.Popen(
        ["bash", "-c", f"exec {run}"],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait(f"http://127.0.0.1:{ports['9464']}/readyz")
        answer = subprocess.run(
            ["bash", "-c", order], capture_output=True, text=True, timeout=30, check=True
        )
        envelope = json.loads(answer.stdout)["error"]
        assert envelope["code"] == "VALIDATION_FAILED"
        assert envelope["field"] == "/qty"
        assert envelope["upstream_status"] == 422
        counted = subprocess.run(
            ["bash", "-c", metrics], capture_output=True, text=True, timeout=30, check=True
        )
        assert 'code="VALIDATION_FAILED"' in counted.stdout
    finally:
        mend.terminate()
        mend.wait(timeout=30)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_readme_first_example_answers_with_the_envelope(ports: dict[str, int]) -> None:
    """The order the API refuses comes back as VALIDATION_FAILED naming /qty, and the metrics
    line the example greps for counts it."""
    run = _first_example()[0].replace(":9000", f":{ports['9000']}")
    _serve_and_ask(run, ports, ROOT)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_readme_config_example_answers_the_same(ports: dict[str, int], tmp_path: Path) -> None:
    """README's config file, saved as mend.yaml and run with its command, fronts the same API."""
    config = next(b for b in blocks(ROOT / "README.md") if b.lang == "yaml").text
    (tmp_path / "mend.yaml").write_text(config.replace(":9000", f":{ports['9000']}"))
    (command,) = [b.text.strip() for b in blocks(ROOT / "README.md") if "--config" in b.text]
    assert command == ".venv/bin/mend run --config mend.yaml"
    _serve_and_ask(command.replace(".venv/bin/mend", f"{sys.executable} -m proxy"), ports, tmp_path)


def test_the_first_example_is_the_readme_s() -> None:
    """The test above runs README's block: a mend run line and two curl lines."""
    run, order, metrics = _first_example()
    assert run.startswith(".venv/bin/mend run --upstream http://127.0.0.1:9000")
    assert order.startswith("curl -s localhost:8080/api/orders")
    assert "localhost:9464/metrics" in metrics
