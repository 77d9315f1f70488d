"""Helpers of the footprint section (issue 43): the image's interpreter, start-up probes, CPU time.

The section itself is ``Harness.section_footprint``; what is here needs no harness.

- **The interpreter**: the figure that matters is the deployed sidecar's, and the Docker image
  installs ``mend[speed,tracing,mcp]`` without the dev dependencies (``.venv`` has more, e.g.
  ``rich``, which structlog imports when it is there). ``bench/make-image-venv`` builds
  ``bench/.venv-image`` that way (editable: the working tree's code) from ``.venv``'s base
  interpreter; ``image_python`` builds it once and rebuilds it when ``pyproject.toml`` changes.
- **Bytecode**: the image's pip compiled every module at install time, while the dev shell sets
  ``PYTHONDONTWRITEBYTECODE`` and an editable install compiles nothing, so every start would
  compile mend's modules again (about 0.15 s, see the README). The proxies run with
  ``PYTHONPYCACHEPREFIX`` pointing into ``bench/.pycache-footprint`` (nothing written under
  ``proxy/``), mend's tree compiled there first, and a discarded start fills in the rest.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.procs import BenchError, Proc, descendants, http_get

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
IMAGE_VENV = BENCH / ".venv-image"
PYCACHE = BENCH / ".pycache-footprint"
#: what the image installs (Dockerfile): ``pip install "mend[speed,tracing,mcp]"``
IMAGE_EXTRAS = "speed,tracing,mcp"
#: how often a start-up probe asks (at most; a refused connection returns at once)
POLL_S = 0.002


@dataclass
class Interpreter:
    """An interpreter for the proxies, the venv it belongs to, and their environment."""

    python: str
    venv: str
    note: str = ""
    env: dict[str, str] | None = field(default=None, repr=False)


def _pyproject_hash() -> str:
    return hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()


def image_venv_current() -> bool:
    stamp = IMAGE_VENV / ".installed"
    python = IMAGE_VENV / "bin" / "python"
    if not python.exists() or not stamp.exists():
        return False
    return stamp.read_text().strip() == _pyproject_hash()


def build_image_venv() -> str | None:
    """Build ``bench/.venv-image``; the reason when it could not be built, else None."""
    print(
        "[bench] building bench/.venv-image (mend[speed,tracing,mcp])", file=sys.stderr, flush=True
    )
    try:
        done = subprocess.run(
            ["bash", str(BENCH / "make-image-venv")],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=900,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if done.returncode != 0:
        lines = [x for x in (done.stderr or done.stdout).splitlines() if "WARNING" not in x]
        return f"bench/make-image-venv failed ({done.returncode}): {' '.join(lines[-3:])}"
    return None


def image_python(fallback: str) -> Interpreter:
    """The image's interpreter, built once; ``fallback`` (with the reason) when it cannot be."""
    if not image_venv_current():
        reason = build_image_venv()
        if reason is not None:
            note = f"bench/.venv-image: {reason}"
            return Interpreter(fallback, venv_of(fallback), note, proxy_env())
    python = IMAGE_VENV / "bin" / "python"
    return Interpreter(str(python), "bench/.venv-image", "", proxy_env())


def venv_of(python: str) -> str:
    path = Path(python).absolute()
    try:
        return str(path.parent.parent.relative_to(REPO))
    except ValueError:
        return str(path.parent.parent)


def proxy_env() -> dict[str, str]:
    """The proxies' environment: bytecode cached under ``bench/.pycache-footprint``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    return env


def compile_tree(python: str) -> None:
    """mend's modules compiled into the cache, as the image's pip compiled them."""
    subprocess.run(
        [python, "-m", "compileall", "-q", str(REPO / "proxy")],
        env=proxy_env(),
        capture_output=True,
        timeout=300,
        check=False,
    )


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` and its live descendants, from ``/proc/<pid>/stat``."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in descendants(pid):
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            continue
        # the command name (field 2) may hold spaces; the fields after it are numbers
        fields = stat.rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / tick


def sequential_gets(port: int, path: str, count: int) -> None:
    """``count`` GETs, one after another, over one keep-alive connection; all must be 200."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        for n in range(count):
            conn.request("GET", path)
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                raise BenchError(f"GET {path} #{n} answered {resp.status}")
    finally:
        conn.close()


def first_200(
    proc: Proc,
    port: int,
    path: str,
    started: float,
    *,
    timeout: float = 60.0,
    then: Callable[[], None] | None = None,
) -> float:
    """Seconds from ``started`` to the first 200 of ``GET path``, asking every ``POLL_S``;
    ``then`` runs right after that 200 (to read the CPU time at that moment)."""
    deadline = started + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise BenchError(f"{proc.name} exited before {path} answered:\n{proc.log_tail()}")
        try:
            status, _, _ = http_get(port, path, timeout=5.0)
        except OSError:
            status = 0
        if status == 200:
            at = time.monotonic() - started
            if then is not None:
                then()
            return at
        time.sleep(POLL_S)
    raise BenchError(f"{proc.name}: no 200 from {path} in {timeout:.0f} s:\n{proc.log_tail()}")


def probe_startup(
    proc: Proc, started: float, probes: dict[str, tuple[int, str]], cpu_at: str
) -> dict[str, float]:
    """Every probe (name -> port, path) polled in its own thread from ``started``; the seconds
    to each one's first 200, and ``cpu_s``: the process's CPU time when ``cpu_at``'s came."""
    out: dict[str, float] = {}
    errors: list[BaseException] = []

    def run(name: str, port: int, path: str) -> None:
        def cpu() -> None:
            out["cpu_s"] = cpu_seconds(proc.pid)

        try:
            out[name] = first_200(proc, port, path, started, then=cpu if name == cpu_at else None)
        except BenchError as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=run, args=(name, port, path))
        for name, (port, path) in probes.items()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise BenchError(str(errors[0]))
    return out


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]
