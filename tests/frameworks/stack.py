"""The real framework apps, nginx and one ``mend run`` in front of them all, on loopback.

Each app is its own process on a free port, stopped by its PID; mend routes ``/<app>/...`` to it
(``strip_prefix``), so one proxy with the shipped packs answers every case.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import yaml

from tests.installs import npm_installed

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
NODE = HERE / "node"
#: generous: eleven servers import their frameworks at once, on a CI box shared with others
START_TIMEOUT_S = 90.0
_PR_SET_PDEATHSIG = 1

#: app name -> the command (given the port) that serves it
PYTHON_APPS: dict[str, tuple[str, ...]] = {
    "fastapi": ("fastapi_app.py",),
    "fastapi-debug": ("fastapi_app.py", "debug"),
    "flask": ("flask_app.py",),
    "flask-debug": ("flask_app.py", "debug"),
    "drf": ("drf_app.py",),
    "drf-debug": ("drf_app.py", "debug"),
    "strawberry": ("strawberry_app.py",),
}
#: app name -> (script, NODE_ENV)
NODE_APPS: dict[str, tuple[str, str]] = {
    "express": ("express_app.js", "production"),
    "express-dev": ("express_app.js", "development"),
    "hapi": ("hapi_app.js", "production"),
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None
    )


def node_ready() -> str | None:
    """Why the Node apps cannot run, or ``None``: installs the pinned packages once (``npm ci``)."""
    return npm_installed(NODE, timeout=300)


@dataclass
class Process:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


def _die_with_parent() -> Callable[[], object] | None:
    """A ``preexec_fn`` (Linux) that has the child SIGTERMed when the test run dies, even by
    SIGKILL, so no app outlives a killed run. libc is loaded here, in the parent: the child only
    makes one system call between fork and exec."""
    if sys.platform != "linux":
        return None
    return partial(ctypes.CDLL(None, use_errno=True).prctl, _PR_SET_PDEATHSIG, signal.SIGTERM)


def _spawn(
    name: str, argv: list[str], port: int, logs: Path, env: dict[str, str] | None = None
) -> Process:
    log = logs / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=ROOT,
            preexec_fn=_die_with_parent(),  # noqa: PLW1509 (one prctl call, see there)
        )
    return Process(name, proc, port, log)


def _wait(process: Process, deadline: float) -> None:
    while time.monotonic() < deadline:
        if process.proc.poll() is not None:
            tail = process.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{process.name} exited with {process.proc.returncode}:\n{tail}")
        try:
            with socket.create_connection(("127.0.0.1", process.port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{process.name} did not listen on {process.port} in {START_TIMEOUT_S} s")


def _nginx_conf(directory: Path, port: int, dead_port: int) -> Path:
    conf = directory / "nginx.conf"
    conf.write_text(
        f"""daemon off;
pid {directory}/nginx.pid;
error_log {directory}/nginx-error.log;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {directory}/body;
    proxy_temp_path {directory}/proxy;
    fastcgi_temp_path {directory}/fastcgi;
    uwsgi_temp_path {directory}/uwsgi;
    scgi_temp_path {directory}/scgi;
    server {{
        listen 127.0.0.1:{port};
        client_max_body_size 1k;
        location / {{ proxy_pass http://127.0.0.1:{dead_port}; }}
    }}
}}
""",
        encoding="utf-8",
    )
    return conf


@dataclass
class Stack:
    """Where mend listens, and which apps are behind it (others were skipped, with the reason)."""

    mend: str
    apps: dict[str, Process] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


def _start_apps(logs: Path, wanted: set[str]) -> tuple[list[Process], dict[str, str]]:
    started: list[Process] = []
    skipped: dict[str, str] = {}
    python = sys.executable
    for name, (script, *args) in PYTHON_APPS.items():
        if name not in wanted:
            continue
        port = free_port()
        argv = [python, str(HERE / "apps" / script), str(port), *args]
        started.append(_spawn(name, argv, port, logs))
    why_not_node = node_ready() if wanted & set(NODE_APPS) else None
    for name, (script, node_env) in NODE_APPS.items():
        if name not in wanted:
            continue
        if why_not_node:
            skipped[name] = why_not_node
            continue
        port = free_port()
        env = {**os.environ, "NODE_ENV": node_env}
        started.append(_spawn(name, ["node", str(NODE / script), str(port)], port, logs, env))
    if "nginx" in wanted:
        _start_nginx(logs, started, skipped)
    return started, skipped


def _start_nginx(logs: Path, started: list[Process], skipped: dict[str, str]) -> None:
    nginx = nginx_binary()
    if nginx is None:
        skipped["nginx"] = "nginx is not installed (scripts/install-system-deps installs it)"
    else:
        port = free_port()
        conf = _nginx_conf(logs, port, dead_port=free_port())
        argv = [nginx, "-c", str(conf), "-p", str(logs), "-e", str(logs / "nginx-error.log")]
        started.append(_spawn("nginx", argv, port, logs))


def _mend_config(path: Path, apps: list[Process]) -> None:
    routes = [
        {
            "name": app.name,
            "prefix": f"/{app.name}/",
            "upstream": f"http://127.0.0.1:{app.port}",
            "strip_prefix": True,
            "read_timeout": 10.0,
        }
        for app in apps
    ]
    path.write_text(yaml.safe_dump({"routes": routes}), encoding="utf-8")


@contextmanager
def running_stack(logs: Path, wanted: set[str] | None = None) -> Iterator[Stack]:
    """The ``wanted`` apps (default all), then mend in front of them; all stopped by PID."""
    if wanted is None:
        wanted = {*PYTHON_APPS, *NODE_APPS, "nginx"}
    with ExitStack() as stack:
        apps, skipped = _start_apps(logs, wanted)
        for app in apps:
            stack.callback(app.stop)
        deadline = time.monotonic() + START_TIMEOUT_S
        for app in apps:
            _wait(app, deadline)
        config = logs / "mend.yaml"
        _mend_config(config, apps)
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "proxy",
            "run",
            "--config",
            str(config),
            "--listen",
            f"127.0.0.1:{port}",
            "--admin-listen",
            f"127.0.0.1:{free_port()}",
        ]
        mend = _spawn("mend", argv, port, logs)
        stack.callback(mend.stop)
        _wait(mend, time.monotonic() + START_TIMEOUT_S)
        yield Stack(f"http://127.0.0.1:{port}", {a.name: a for a in apps}, skipped)
