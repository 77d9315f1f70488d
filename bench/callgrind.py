"""Instructions per request, counted by callgrind: the one measure a busy machine cannot move.

wrk's requests/s on a shared 2-core VM move by 20 % between runs of the same code. callgrind
counts the instructions the proxy executes, which for the same binaries and inputs is the same
on every run (to about 0.1 %), whatever else the machine does. It does not see time in the
kernel (system calls) or stalls on memory, so it complements the wall-clock matrix, not replaces
it: a change that removes instructions but adds a system call looks better here than it is.

The proxy starts under ``valgrind --tool=callgrind --instr-atstart=no``; after start-up and a
warm-up, ``callgrind_control -i on`` switches counting on for exactly ``requests`` requests
(sequential keep-alive clients, so every request is complete when counting stops), then off.
"""

from __future__ import annotations

import http.client
import re
import shutil
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path

from bench.procs import BenchError, Proc

_TOTAL = re.compile(r"^(?:summary|totals):\s+(\d+)", re.M)


def available() -> str | None:
    """Why callgrind cannot run here, or None when it can."""
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            return f"{tool} not found (apt-get install valgrind)"
    return None


def wrap(cmd: Sequence[str], out_file: Path) -> list[str]:
    """``cmd`` under callgrind, counting nothing until switched on."""
    return [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={out_file}",
        *cmd,
    ]


def drive(port: int, path: str, total: int, connections: int = 4) -> None:
    """``total`` GET requests over ``connections`` keep-alive connections, each one waited for."""
    errors: list[BaseException] = []

    def client(count: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            for _ in range(count):
                conn.request("GET", path)
                conn.getresponse().read()
        except (OSError, http.client.HTTPException) as exc:
            errors.append(exc)
        finally:
            conn.close()

    share, extra = divmod(total, connections)
    threads = [
        threading.Thread(target=client, args=(share + (1 if n < extra else 0),))
        for n in range(connections)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise BenchError(f"requests to 127.0.0.1:{port}{path} failed under callgrind: {errors[0]}")


def _control(proc: Proc, *args: str) -> None:
    done = subprocess.run(
        ["callgrind_control", *args, str(proc.pid)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise BenchError(f"callgrind_control {' '.join(args)} failed: {done.stderr or done.stdout}")


def count(
    proc: Proc,
    out_file: Path,
    port: int,
    path: str,
    *,
    requests: int,
    warmup: int,
    connections: int = 4,
) -> int:
    """Instructions the proxy spent on exactly ``requests`` requests for ``path``, after warm-up,
    over ``connections`` keep-alive connections.

    Counters are zeroed first and dumped after, so one proxy process serves every path.
    """
    drive(port, path, warmup, connections)
    before = set(out_file.parent.glob(out_file.name + "*"))
    _control(proc, "--zero")
    _control(proc, "--instr=on")
    try:
        drive(port, path, requests, connections)
    finally:
        _control(proc, "--instr=off")
    _control(proc, "--dump")
    dumps = sorted(set(out_file.parent.glob(out_file.name + "*")) - before)
    if not dumps:
        raise BenchError(f"callgrind wrote no dump for {path} next to {out_file}")
    totals = [int(m) for f in dumps for m in _TOTAL.findall(f.read_text(errors="replace"))]
    if not totals:
        raise BenchError(f"no callgrind totals in {dumps[0]}")
    return max(totals)
