"""mend benchmark harness: mend vs a bare aiohttp proxy vs nginx, side by side in one run.

    bench/run [--quick] [--duration S] [--repeats N] [--connections 1,32,128]
              [--only mend,bare,nginx,bare-uvloop,bare-debian] [--sections ...]
              [--out bench/results/<ts>.json] [--write-readme]

Layout on a 2-core machine: the upstream nginx, wrk and this harness share core 0; the proxy
under test gets core 1 to itself. Only ratios measured in the same run are claims.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import callgrind, footprint, report, rulegen, upstream
from bench.procs import BenchError, Proc, ProcessGroup, free_port, http_get, pinned, rss_bytes
from bench.procs import wait_ready as _wait_ready
from bench.wrk import WrkResult, parse_wrk

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
DEBIAN_VENV = BENCH / ".venv-debian"

PATHS = ("/ok", "/big", "/err500", "/err422", "/err429")
SUCCESS_PATHS = frozenset({"/ok", "/big"})
# Run only when named (--paths), and by the footprint section: the error bodies with values that
# differ on every response, as a real server's do (every other error path repeats its body byte
# for byte, which anything mend remembers by body turns into a cache hit).
FRESH_PATHS = ("/err500-fresh", "/err422-fresh", "/err429-fresh")
OPTIONAL_PATHS = FRESH_PATHS
EXPECTED_STATUS = {
    "/ok": 200,
    "/big": 200,
    "/err500": 500,
    "/err422": 422,
    "/err429": 429,
    "/err500-fresh": 500,
    "/err422-fresh": 422,
    "/err429-fresh": 429,
}
# bare-uvloop runs everywhere: mend picks uvloop when it is installed, and its fair baseline
# is the bare proxy on the same event loop.
MAIN_CONFIGS = ("mend", "bare", "bare-uvloop", "nginx")
# The interpreter variant only needs the cheapest path to show its effect; running it
# everywhere would lengthen the run for no new information.
EXTRA_CONFIGS = ("bare-debian",)
# Run only when named (--only): the bare proxy on mend's own edge (bench/edge_proxy.py), the
# floor under mend's request path.
OPTIONAL_CONFIGS = ("bare-edge",)
EXTRA_PATHS = ("/ok",)
SECTIONS = (
    "matrix",
    "rules",
    "memory",
    "stream",
    "startup",
    "reload",
    "workers",
    "instructions",
    "retries",
    "footprint",
)
RULE_SIZES = (10, 100, 1000)
#: Requests counted per path under callgrind; /big moves 2 MiB each, slowly there.
INSTRUCTION_REQUESTS = {"/big": 40}
#: The retry policy's cost (issue 41): mend's settings by name, and the paths each is counted on.
#: ``/flaky`` answers 503, then 200 (a retry that succeeds); ``/err503`` 503 every time.
RETRY_CONFIGS: dict[str, tuple[dict[str, Any] | None, tuple[str, ...]]] = {
    "retries on": (None, ("/ok", "/flaky", "/err503")),
    "retries off": ({"attempts": 1}, ("/ok", "/err503")),
}

#: issue 43's figures: fresh processes per memory figure and per start-up figure, requests
#: before the memory figure, and the paths counted under callgrind
FOOTPRINT_MEMORY_RUNS = 3
FOOTPRINT_STARTUP_RUNS = 5
FOOTPRINT_REQUESTS = 1000
FOOTPRINT_PATHS = ("/ok", *FRESH_PATHS)

LOAD_CPU = "0"
PROXY_CPU = "1"


@dataclass
class Options:
    duration: int
    repeats: int
    connections: list[int]
    configs: list[str]
    paths: list[str]
    sections: list[str]
    warmup: int
    pin: bool
    python: str
    out: Path
    write_readme: bool
    label: str
    quick: bool
    footprint_python: str | None = None


@dataclass
class Server:
    name: str
    port: int
    proc: Proc
    admin_port: int | None = None
    paths: tuple[str, ...] = PATHS
    ready_s: float = 0.0
    started: float = 0.0
    rss_samples: list[int] = field(default_factory=list)


class Harness:
    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.tmp = Path(tempfile.mkdtemp(prefix="mend-bench-"))
        self.group = ProcessGroup(self.tmp)
        self.results: dict[str, Any] = {"notes": []}
        self.upstream_port = 0

    # -- processes -------------------------------------------------------------------------

    def cpu(self, cpus: str) -> str | None:
        return cpus if self.opts.pin else None

    def note(self, text: str) -> None:
        print(f"[bench] {text}", file=sys.stderr, flush=True)
        self.results["notes"].append(text)

    def start_upstream(self) -> None:
        self.upstream_port = free_port()
        conf = upstream.write_upstream_config(self.tmp, self.upstream_port)
        proc = self.group.start("upstream", pinned(upstream.nginx_cmd(conf), self.cpu(LOAD_CPU)))
        _wait_ready(proc, self.upstream_port, "/ok")

    @property
    def upstream_url(self) -> str:
        return f"http://127.0.0.1:{self.upstream_port}"

    def start_config(
        self,
        name: str,
        *,
        extra: Sequence[str] = (),
        cpus: str = PROXY_CPU,
        paths: tuple[str, ...] = PATHS,
        wrap: Callable[[list[str]], list[str]] | None = None,
        interp: footprint.Interpreter | None = None,
        wait: bool = True,
    ) -> Server:
        """Start configuration ``name`` (under ``interp``, default ``--python``) and, when
        ``wait``, wait until it answers; ``wait=False`` leaves the probing to the caller."""
        python = interp.python if interp else self.opts.python
        env = interp.env if interp else None
        port = free_port()
        admin: int | None = None
        if name == "nginx":
            conf = upstream.write_proxy_config(self.tmp, port, self.upstream_port)
            cmd = upstream.nginx_cmd(conf)
        elif name == "bare-edge":
            cmd = [
                python,
                str(BENCH / "edge_proxy.py"),
                "--upstream",
                self.upstream_url,
                "--listen",
                f"127.0.0.1:{port}",
            ]
        elif name.startswith("bare"):
            if name == "bare-debian":
                python = str(DEBIAN_VENV / "bin" / "python")
            cmd = [
                python,
                str(BENCH / "bare_proxy.py"),
                "--upstream",
                self.upstream_url,
                "--listen",
                f"127.0.0.1:{port}",
            ]
            if name == "bare-uvloop":
                cmd.append("--uvloop")
        elif name.startswith("mend"):
            admin = free_port()
            # a --config file names its own upstream
            source = [] if "--config" in extra else ["--upstream", self.upstream_url]
            cmd = [
                *mend_cmd(python),
                *source,
                "--listen",
                f"127.0.0.1:{port}",
                "--admin-listen",
                f"127.0.0.1:{admin}",
                *extra,
            ]
        else:
            raise BenchError(f"unknown configuration {name!r}")
        # under callgrind a proxy starts some 20 times slower
        patience = 20.0 if wrap is None else 600.0
        if wrap is not None:
            cmd = wrap(cmd)
        start = time.monotonic()
        proc = self.group.start(name, pinned(cmd, self.cpu(cpus)), cwd=REPO, env=env)
        if not wait:
            return Server(name, port, proc, admin, paths, started=start)
        probe = (port, "/ok") if admin is None else (admin, "/readyz")
        _wait_ready(proc, *probe, timeout=patience)
        ready = time.monotonic() - start
        if admin is not None:
            _wait_ready(proc, port, "/ok", timeout=patience)
        return Server(name, port, proc, admin, paths, ready, started=start)

    def stop(self, server: Server) -> None:
        self.group.stop(server.proc)

    # -- load ------------------------------------------------------------------------------

    def wrk(self, server: Server, path: str, connections: int, duration: int) -> WrkResult:
        cmd = pinned(
            [
                "wrk",
                "-t1",
                f"-c{connections}",
                f"-d{duration}s",
                "--latency",
                "--timeout",
                "10s",
                f"http://127.0.0.1:{server.port}{path}",
            ],
            self.cpu(LOAD_CPU),
        )
        try:
            with self.sample_rss(server):
                done = subprocess.run(
                    cmd, capture_output=True, text=True, timeout=duration + 60, check=False
                )
        except subprocess.TimeoutExpired as exc:
            raise BenchError(f"wrk against {server.name} {path} hung: {exc}") from exc
        if done.returncode != 0:
            raise BenchError(f"wrk failed ({done.returncode}): {done.stderr.strip()}")
        try:
            result = parse_wrk(done.stdout)
        except ValueError as exc:
            raise BenchError(
                f"{exc}; wrk against {server.name} {path} printed:\n{done.stdout}{done.stderr}"
            ) from exc
        if result.error_count or result.requests == 0:
            self.note(
                f"{server.name} {path} c={connections}: {result.requests} requests, "
                f"socket errors {result.socket_errors}"
            )
        if not server.proc.alive():
            raise BenchError(f"{server.name} died under load:\n{server.proc.log_tail()}")
        return result

    @contextlib.contextmanager
    def sample_rss(self, server: Server, interval: float = 0.1) -> Iterator[list[int]]:
        samples: list[int] = []
        stop = threading.Event()

        def loop() -> None:
            while not stop.is_set():
                samples.append(rss_bytes(server.proc.pid))
                stop.wait(interval)

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        try:
            yield samples
        finally:
            stop.set()
            thread.join()
            server.rss_samples.extend(samples)

    def warm(self, servers: Sequence[Server], paths: Sequence[str], connections: int = 32) -> None:
        if self.opts.warmup <= 0:
            return
        for server in servers:
            for path in paths:
                if path in server.paths:
                    self.wrk(server, path, connections, self.opts.warmup)

    def round_robin(
        self, servers: Sequence[Server], paths: Sequence[str], connections: Sequence[int]
    ) -> list[dict[str, Any]]:
        """Every (path, conns) cell runs each server back to back; the order rotates per repeat
        so that no configuration always runs first (cold caches) or last (warm, throttled)."""
        runs: list[dict[str, Any]] = []
        total = self.opts.repeats * sum(
            1 for p in paths for _ in connections for s in servers if p in s.paths
        )
        n = 0
        for rep in range(self.opts.repeats):
            shift = rep % max(1, len(servers))
            order = [*servers[shift:], *servers[:shift]]
            for path in paths:
                for conns in connections:
                    for server in order:
                        if path not in server.paths:
                            continue
                        n += 1
                        print(
                            f"[bench] {n}/{total} {server.name} {path} c={conns}",
                            file=sys.stderr,
                            flush=True,
                        )
                        result = self.wrk(server, path, conns, self.opts.duration)
                        runs.append(
                            {
                                "config": server.name,
                                "path": path,
                                "connections": conns,
                                "repeat": rep,
                                **result.to_json(),
                            }
                        )
        return runs

    # -- sections --------------------------------------------------------------------------

    def check_responses(self, server: Server) -> dict[str, Any]:
        """One request per path, to catch a proxy that is fast because it is wrong."""
        checks: dict[str, Any] = {}
        for path in server.paths:
            status, headers, body = http_get(server.port, path, timeout=10)
            entry: dict[str, Any] = {
                "status": status,
                "bytes": len(body),
                "content_type": headers.get("content-type"),
            }
            problems = []
            if status != EXPECTED_STATUS[path]:
                problems.append(f"status {status}, upstream sent {EXPECTED_STATUS[path]}")
            if server.name.startswith("mend") and path not in SUCCESS_PATHS:
                try:
                    err = json.loads(body)["error"]
                    entry["code"], entry["rule"] = err["code"], err["rule"]
                except (ValueError, KeyError, TypeError):
                    problems.append("body is not a mend envelope")
            elif path == "/big" and len(body) != upstream.BIG_SIZE:
                problems.append(f"{len(body)} bytes, expected {upstream.BIG_SIZE}")
            if problems:
                entry["problems"] = problems
                self.note(f"check {server.name} {path}: {'; '.join(problems)}")
            checks[path] = entry
        return checks

    def section_matrix(self, mend_servers: dict[str, Server]) -> None:
        servers: list[Server] = []
        for name in self.opts.configs:
            if name == "bare-debian" and not debian_python_ok():
                self.note("bare-debian not available: run bench/make-debian-venv first")
                continue
            paths = tuple(
                p for p in self.opts.paths if name not in EXTRA_CONFIGS or p in EXTRA_PATHS
            )
            if not paths:
                continue
            if name == "mend":
                server = mend_servers["mend"]
                server.paths = paths
            else:
                server = self.start_config(name, paths=paths)
            servers.append(server)
        self.results["checks"] = {s.name: self.check_responses(s) for s in servers}
        self.warm(servers, self.opts.paths)
        rss_before = {s.name: len(s.rss_samples) for s in servers}
        runs = self.round_robin(servers, self.opts.paths, self.opts.connections)
        self.results["runs"] = runs
        self.results["summary"] = summarize(runs)
        self.results["baseline"] = self.baseline()
        self.results["load_rss"] = {
            s.name: max(s.rss_samples[rss_before[s.name] :], default=0) for s in servers
        }
        for server in servers:
            if server.name != "mend":
                self.stop(server)

    def baseline(self) -> str:
        loop = self.results["meta"].get("mend_event_loop")
        if loop == "uvloop":
            if "bare-uvloop" in self.results["summary"]:
                return "bare-uvloop"
            self.note("mend runs on uvloop but bare-uvloop was not run: the baseline is on asyncio")
        return "bare"

    def section_rules(self) -> None:
        servers = []
        for size in RULE_SIZES:
            rules_dir = rulegen.write_rules(self.tmp / f"rules-{size}", size)
            extra = ["--rules", str(rules_dir)]
            servers.append(self.start_config("mend", extra=extra, paths=("/err500",)))
            servers[-1].name = f"mend-{size}-rules"
        self.results["rules_checks"] = {s.name: self.check_responses(s) for s in servers}
        self.warm(servers, ["/err500"])
        conns = sorted({1, 32} & set(self.opts.connections)) or self.opts.connections[:1]
        runs = self.round_robin(servers, ["/err500"], conns)
        self.results["rules"] = {
            "runs": runs,
            "summary": summarize(runs),
            # mend loads --rules files before its shipped packs, so all N rules run first.
            "order": "generated rules, then the shipped packs",
        }
        for server in servers:
            self.stop(server)

    def section_memory(self, mend: Server) -> None:
        self.results.setdefault("memory", {})["mend_idle_after_start"] = rss_bytes(mend.proc.pid)

    def section_memory_after(self, mend: Server) -> None:
        mem = self.results.setdefault("memory", {})
        time.sleep(1.0)
        mem["mend_idle_after_load"] = rss_bytes(mend.proc.pid)
        mem["mend_max_under_load"] = self.results.get("load_rss", {}).get("mend")

    def section_stream(self) -> None:
        # Fresh processes: one that has just served the load matrix has allocator slack that
        # would hide growth caused by the stream itself.
        out: dict[str, Any] = {}
        for name in ("mend", "bare"):
            if name not in self.opts.configs:
                continue
            server = self.start_config(name, paths=("/ok",))
            try:
                self.check_responses(server)
                out[name] = self.stream_once(server)
            finally:
                self.stop(server)
        self.results["stream"] = out

    def stream_once(self, server: Server) -> dict[str, Any]:
        samples: list[int] = []
        baseline = rss_bytes(server.proc.pid)
        cmd = pinned(
            [
                sys.executable,
                str(BENCH / "stream_client.py"),
                f"http://127.0.0.1:{server.port}/huge",
                "300",
            ],
            self.cpu(LOAD_CPU),
        )
        client = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=REPO)
        try:
            while client.poll() is None:
                samples.append(rss_bytes(server.proc.pid))
                time.sleep(0.1)
            stdout, _ = client.communicate(timeout=5)
        finally:
            if client.poll() is None:
                client.kill()
                client.wait()
        got = json.loads(stdout) if stdout.strip() else {}
        if got.get("bytes") != upstream.HUGE_SIZE or got.get("status") != 200:
            self.note(
                f"stream through {server.name}: got {got}, expected 200 and "
                f"{upstream.HUGE_SIZE} bytes"
            )
        peak = max(samples, default=baseline)
        return {
            "baseline_rss": baseline,
            "max_rss": peak,
            "growth": peak - baseline,
            "samples": len(samples),
            **got,
        }

    def section_startup(self, count: int = 5) -> None:
        out: dict[str, Any] = {}
        for name in ("mend", "bare"):
            if name not in self.opts.configs:
                continue
            times = []
            for _ in range(count):
                server = self.start_config(name)
                times.append(server.ready_s)
                self.stop(server)
            out[name] = {
                "median_s": statistics.median(times),
                "all_s": times,
                "ready_probe": "/readyz on the admin port"
                if name == "mend"
                else "first 200 from GET /ok",
            }
        self.results["startup"] = out

    def section_reload(self, count: int = 5) -> None:
        rules_dir = rulegen.write_rules(self.tmp / "rules-reload", 1000)
        extra = ["--rules", str(rules_dir)]
        server = self.start_config("mend", extra=extra, paths=("/err500",))
        assert server.admin_port is not None
        times, statuses = [], []
        try:
            for _ in range(count):
                start = time.monotonic()
                status, _, _ = http_get(
                    server.admin_port, "/-/reload", method="POST", body=b"", timeout=60
                )
                times.append(time.monotonic() - start)
                statuses.append(status)
                if status in (404, 405, 501):
                    break
        finally:
            self.stop(server)
        if any(s in (404, 405, 501) for s in statuses):
            self.results["reload"] = {
                "available": False,
                "reason": f"POST /-/reload answered HTTP {statuses[-1]}",
            }
        else:
            self.results["reload"] = {
                "available": True,
                "rules": 1000,
                "statuses": statuses,
                "median_s": statistics.median(times),
                "all_s": times,
            }

    def section_workers(self) -> None:
        help_text = mend_help(self.opts.python)
        if "--workers" not in help_text:
            self.results["workers"] = {
                "available": False,
                "reason": "`proxy run --help` lists no --workers",
            }
            return
        servers = []
        try:
            for n in (1, 2):
                # Two workers need two cores: the proxy may use both, sharing core 0 with wrk
                # and the upstream, and one worker gets the same allowance for a fair ratio.
                server = self.start_config(
                    "mend", extra=["--workers", str(n)], cpus="0,1", paths=("/ok",)
                )
                server.name = f"mend-{n}-worker{'s' if n > 1 else ''}"
                servers.append(server)
        except BenchError as exc:
            for server in servers:
                self.stop(server)
            self.results["workers"] = {"available": False, "reason": str(exc)[:300]}
            return
        self.warm(servers, ["/ok"], 128)
        conns = [c for c in self.opts.connections if c >= 32] or [32]
        runs = self.round_robin(servers, ["/ok"], conns)
        self.results["workers"] = {
            "available": True,
            "runs": runs,
            "summary": summarize(runs),
            "pinning": "proxy on cores 0,1; wrk and upstream on core 0",
        }
        for server in servers:
            self.stop(server)

    def section_instructions(self) -> None:
        """Instructions per request under callgrind: mend and its bare baseline, every path."""
        missing = callgrind.available()
        if missing:
            self.results["instructions"] = {"available": False, "reason": missing}
            return
        baseline = self.results.get("baseline") or "bare-uvloop"
        optional = [c for c in OPTIONAL_CONFIGS if c in self.opts.configs]
        per_request = {
            name: self.count_instructions(name, self.opts.paths)
            for name in ("mend", baseline, *optional)
        }
        self.results["instructions"] = {
            "available": True,
            "baseline": baseline,
            "per_request": per_request,
        }

    def count_instructions(
        self,
        name: str,
        paths: Sequence[str],
        *,
        interp: footprint.Interpreter | None = None,
    ) -> dict[str, float]:
        """Instructions per request of configuration ``name`` on each path, one process under
        callgrind serving them all (see bench/callgrind.py)."""
        tag = name if interp is None else f"{name}-{self.group.started}"
        cg_out = self.tmp / f"callgrind-{tag}.out"
        wrap = functools.partial(callgrind.wrap, out_file=cg_out)
        # the file watcher's polls land in the counted window (under callgrind a request
        # takes ~50x longer, so each poll's reads and checksums spread over few requests):
        # off here, to count the request path alone
        quiet = ["--no-watch"] if name.startswith("mend") else []
        server = self.start_config(name, wrap=wrap, extra=quiet, interp=interp)
        counts: dict[str, float] = {}
        try:
            for path in paths:
                n = INSTRUCTION_REQUESTS.get(path, 400)
                total = callgrind.count(
                    server.proc, cg_out, server.port, path, requests=n, warmup=n // 2
                )
                counts[path] = total / n
        finally:
            self.stop(server)
        return counts

    def section_retries(self) -> None:
        """What the retry policy costs, by instructions under callgrind (issue 41): a success with
        retries on (the default) and off (``attempts: 1``), a 503 retried into a 200 (``/flaky``),
        a 503 on both tries, and a 503 answered at once. One connection, so that ``/flaky``'s
        turns (503, 200, 503, ...) fall one pair to each request; mend's own counter says how
        many retries the counted requests made."""
        missing = callgrind.available()
        if missing:
            self.results["retries"] = {"available": False, "reason": missing}
            return
        out: dict[str, Any] = {"available": True, "per_request": {}, "retries_per_request": {}}
        for name, (retries, paths) in RETRY_CONFIGS.items():
            settings: dict[str, Any] = {
                "routes": [{"name": "default", "prefix": "/", "upstream": self.upstream_url}]
            }
            if retries is not None:
                settings["retries"] = retries
            conf = self.tmp / f"mend-{name.replace(' ', '-')}.yaml"
            conf.write_text(json.dumps(settings))  # JSON is YAML
            cg_out = self.tmp / f"callgrind-{name.replace(' ', '-')}.out"
            wrap = functools.partial(callgrind.wrap, out_file=cg_out)
            server = self.start_config(
                "mend", wrap=wrap, extra=["--config", str(conf), "--no-watch"]
            )
            counts: dict[str, float] = {}
            made: dict[str, float] = {}
            checks: dict[str, int] = {}
            try:
                for path in paths:
                    # twice: /flaky's first answer may be its 200 half
                    checks[path] = [http_get(server.port, path, timeout=60)[0] for _ in "12"][-1]
                    n = INSTRUCTION_REQUESTS.get(path, 400)
                    before = retries_made(server)
                    total = callgrind.count(
                        server.proc,
                        cg_out,
                        server.port,
                        path,
                        requests=n,
                        warmup=n // 2,
                        connections=1,
                    )
                    counts[path] = total / n
                    # warm-up included: the counted requests retried as the warm-up's did
                    made[path] = (retries_made(server) - before) / (n + n // 2)
            finally:
                self.stop(server)
            out["per_request"][name] = counts
            out["retries_per_request"][name] = made
            out.setdefault("status", {})[name] = checks
        self.results["retries"] = out

    # -- footprint (issue 43) --------------------------------------------------------------

    def section_footprint(self) -> None:
        """Issue 43's four figures in one run: mend against the bare proxy on mend's event loop,
        both on the image's interpreter (bench/footprint.py), bodies that differ per request."""
        interp = self.footprint_interpreter()
        footprint.compile_tree(interp.python)
        out: dict[str, Any] = {
            "python": {
                "venv": interp.venv,
                "note": interp.note,
                **interpreter_info(interp.python),
            },
            "loadavg": {"start": footprint.loadavg()},
        }
        self.results["footprint"] = out
        base = self.footprint_checks(out, interp)
        names = ("mend", base)
        out["memory"] = self.footprint_memory(names, interp)
        out["loadavg"]["after_memory"] = footprint.loadavg()
        out["startup"] = self.footprint_startup(names, interp)
        out["loadavg"]["after_startup"] = footprint.loadavg()
        missing = callgrind.available()
        if missing:
            out["instructions"] = {"available": False, "reason": missing}
        else:
            out["instructions"] = {
                "available": True,
                "per_request": {
                    name: self.count_instructions(name, FOOTPRINT_PATHS, interp=interp)
                    for name in names
                },
            }
        out["loadavg"]["end"] = footprint.loadavg()

    def footprint_interpreter(self) -> footprint.Interpreter:
        if self.opts.footprint_python:
            python = self.opts.footprint_python
            return footprint.Interpreter(
                python,
                footprint.venv_of(python),
                "chosen with --footprint-python",
                footprint.proxy_env(),
            )
        interp = footprint.image_python(self.opts.python)
        if interp.note:
            self.note(f"footprint falls back to {interp.venv}: {interp.note}")
        return interp

    def footprint_checks(self, out: dict[str, Any], interp: footprint.Interpreter) -> str:
        """A discarded start of mend and of its baseline (bytecode cached, pages warm), each
        checked on every footprint path; the baseline: the bare proxy on mend's event loop."""
        mend = self.start_config("mend", interp=interp, paths=FOOTPRINT_PATHS)
        try:
            out["mend_event_loop"] = event_loop_of(mend.proc.pid)
            checks = {"mend": self.check_responses(mend)}
        finally:
            self.stop(mend)
        base = "bare-uvloop" if out["mend_event_loop"] == "uvloop" else "bare"
        bare = self.start_config(base, interp=interp, paths=FOOTPRINT_PATHS)
        try:
            checks[base] = self.check_responses(bare)
        finally:
            self.stop(bare)
        out["baseline"], out["checks"] = base, checks
        return base

    def footprint_memory(
        self, names: Sequence[str], interp: footprint.Interpreter
    ) -> dict[str, Any]:
        """RSS of the process tree after ``FOOTPRINT_REQUESTS`` sequential keep-alive ``GET
        /ok`` in a freshly started process, ``FOOTPRINT_MEMORY_RUNS`` processes each."""
        runs: dict[str, list[dict[str, int]]] = {name: [] for name in names}
        for rep in range(FOOTPRINT_MEMORY_RUNS):
            for name in rotated(names, rep):
                server = self.start_config(name, interp=interp, paths=("/ok",))
                try:
                    ready = rss_bytes(server.proc.pid)
                    footprint.sequential_gets(server.port, "/ok", FOOTPRINT_REQUESTS)
                    after = rss_bytes(server.proc.pid)
                finally:
                    self.stop(server)
                runs[name].append({"ready_rss": ready, "after_rss": after})
        return {
            name: {
                "requests": FOOTPRINT_REQUESTS,
                "median_after_rss": statistics.median(r["after_rss"] for r in found),
                "median_ready_rss": statistics.median(r["ready_rss"] for r in found),
                "runs": found,
            }
            for name, found in runs.items()
        }

    def footprint_startup(
        self, names: Sequence[str], interp: footprint.Interpreter
    ) -> dict[str, Any]:
        """Exec to the first 200 (mend: ``/readyz`` on the admin port and ``GET /ok`` through
        the listener, polled side by side; bare: ``GET /ok``) and the CPU time used up to
        readiness, ``FOOTPRINT_STARTUP_RUNS`` starts each, alternated."""
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
        for rep in range(FOOTPRINT_STARTUP_RUNS):
            for name in rotated(names, rep):
                server = self.start_config(name, interp=interp, wait=False)
                probes = {"ok_s": (server.port, "/ok")}
                if server.admin_port is not None:
                    probes["readyz_s"] = (server.admin_port, "/readyz")
                ready = "readyz_s" if "readyz_s" in probes else "ok_s"
                try:
                    found = footprint.probe_startup(server.proc, server.started, probes, ready)
                finally:
                    self.stop(server)
                runs[name].append(found)
        return {name: startup_summary(found) for name, found in runs.items()}

    # -- driver ----------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        opts = self.opts
        self.results["meta"] = machine_info(opts)
        started = time.monotonic()
        want_mend = "mend" in opts.configs
        if want_mend:
            require_mend(opts.python)
        self.start_upstream()
        if {"matrix", "memory"} & set(opts.sections):
            self.guarded("matrix", self.matrix_and_memory)
        if "stream" in opts.sections:
            self.guarded("stream", self.section_stream)
        for name, needs_mend, fn in (
            ("rules", True, self.section_rules),
            ("startup", False, self.section_startup),
            ("reload", True, self.section_reload),
            ("workers", True, self.section_workers),
            ("instructions", True, self.section_instructions),
            ("retries", True, self.section_retries),
            ("footprint", True, self.section_footprint),
        ):
            if name not in opts.sections:
                continue
            if needs_mend and not want_mend:
                self.results[name] = {"available": False, "reason": "mend not in --only"}
                continue
            self.guarded(name, fn)
        self.results["meta"]["wall_seconds"] = round(time.monotonic() - started, 1)
        return self.results

    def guarded(self, name: str, fn: Callable[[], None]) -> None:
        """Run one section; a failure is recorded and the other sections still run."""
        try:
            fn()
        except BenchError as exc:
            self.results.setdefault("failed", {})[name] = str(exc)
            lines = [line for line in str(exc).splitlines() if line.strip()]
            # The first line says what failed, the last (a log's tail) usually says why.
            why = f" ... {lines[-1].strip()}" if len(lines) > 1 else ""
            self.note(f"section {name} failed: {lines[0] if lines else exc}{why}")
        finally:
            # Whatever the section started stays out of the next section's measurements.
            for proc in [p for p in self.group.procs if p.name != "upstream"]:
                self.group.stop(proc)

    def matrix_and_memory(self) -> None:
        opts = self.opts
        mend: Server | None = None
        if "mend" in opts.configs:
            mend = self.start_config("mend")
            self.results["meta"]["mend_event_loop"] = event_loop_of(mend.proc.pid)
            if "memory" in opts.sections:
                self.section_memory(mend)
        if "matrix" in opts.sections:
            self.section_matrix({"mend": mend} if mend else {})
        if mend is not None and "memory" in opts.sections:
            self.section_memory_after(mend)

    def close(self) -> None:
        self.group.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


# -- helpers -------------------------------------------------------------------------------


def rotated(names: Sequence[str], rep: int) -> list[str]:
    """``names`` rotated by ``rep``, so that no configuration always starts first."""
    shift = rep % max(1, len(names))
    return [*names[shift:], *names[:shift]]


def startup_summary(runs: Sequence[dict[str, float]]) -> dict[str, Any]:
    """Median and every value of each start-up measure (``ok_s``, ``readyz_s``, ``cpu_s``)."""
    keys = sorted({key for run in runs for key in run})
    return {
        key: {
            "median": statistics.median(run[key] for run in runs if key in run),
            "all": [run.get(key) for run in runs],
        }
        for key in keys
    }


def retries_made(server: Server) -> float:
    """``mend_retries_total`` summed over its labels, from mend's admin port."""
    assert server.admin_port is not None
    _, _, body = http_get(server.admin_port, "/metrics", timeout=60)
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in body.decode().splitlines()
        if line.startswith("mend_retries_total{")
    )


def mend_cmd(python: str) -> list[str]:
    return [python, "-m", "proxy", "run"]


def mend_help(python: str) -> str:
    try:
        done = subprocess.run(
            [*mend_cmd(python), "--help"],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"error: {exc}"
    return done.stdout + done.stderr if done.returncode == 0 else ""


def require_mend(python: str) -> None:
    if not (REPO / "proxy" / "tools" / "cli.py").exists():
        raise BenchError(
            "mend is not runnable yet: proxy/tools/cli.py does not exist. "
            "Benchmark the others with --only bare,nginx."
        )
    done = subprocess.run(
        [*mend_cmd(python), "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=30,
        check=False,
    )
    if done.returncode != 0:
        raise BenchError(
            f"`{python} -m proxy run --help` failed ({done.returncode}):\n"
            f"{(done.stderr or done.stdout)[-1500:]}\n"
            "Benchmark the others with --only bare,nginx."
        )


def event_loop_of(pid: int) -> str:
    """uvloop when its extension module is mapped into the process, else asyncio's own loop."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return "unknown"
    return "uvloop" if "/uvloop/" in maps else "asyncio"


def debian_python_ok() -> bool:
    python = DEBIAN_VENV / "bin" / "python"
    if not python.exists():
        return False
    done = subprocess.run([str(python), "-c", "import aiohttp"], capture_output=True, check=False)
    return done.returncode == 0


def summarize(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """config -> path -> connections -> median of each metric across repeats."""
    cells: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for run in runs:
        cells.setdefault((run["config"], run["path"], run["connections"]), []).append(run)
    out: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for (config, path, conns), group in cells.items():
        out.setdefault(config, {}).setdefault(path, {})[str(conns)] = {
            "requests_per_sec": statistics.median(r["requests_per_sec"] for r in group),
            "p50_us": statistics.median(r["p50_us"] for r in group),
            "p99_us": statistics.median(r["p99_us"] for r in group),
            "runs": len(group),
            "socket_errors": sum(sum(r["socket_errors"].values()) for r in group),
        }
    return out


def ratios(summary: dict[str, Any]) -> dict[str, dict[str, dict[str, float | None]]]:
    """path -> connections -> mend/bare and mend/nginx, from the medians."""
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for path, per_conns in (summary.get("mend") or {}).items():
        for conns, m in per_conns.items():
            row: dict[str, float | None] = {}
            for other in ("bare", "bare-uvloop", "nginx"):
                o = (summary.get(other) or {}).get(path, {}).get(conns)
                if o:
                    row[f"mend/{other} req/s"] = report.ratio(
                        m["requests_per_sec"], o["requests_per_sec"]
                    )
                    row[f"mend/{other} p50"] = report.ratio(m["p50_us"], o["p50_us"])
                    row[f"mend/{other} p99"] = report.ratio(m["p99_us"], o["p99_us"])
            out.setdefault(path, {})[conns] = row
    return out


def interpreter_info(python: str) -> dict[str, Any]:
    code = (
        "import json,platform,sys,sysconfig;"
        "a=sysconfig.get_config_var('CONFIG_ARGS') or '';"
        "print(json.dumps({'executable':sys.executable,'real':__import__('os').path.realpath("
        "sys.executable),'version':platform.python_version(),"
        "'pgo':'--enable-optimizations' in a,'lto':'--with-lto' in a}))"
    )
    try:
        done = subprocess.run(
            [python, "-c", code], capture_output=True, text=True, timeout=30, check=True
        )
        info: dict[str, Any] = json.loads(done.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return {"executable": python, "error": str(exc)}
    return info


def _cmd_out(cmd: Sequence[str]) -> str:
    try:
        done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=10, check=False)
    except OSError:
        return ""
    return (done.stdout + done.stderr).strip()


def machine_info(opts: Options) -> dict[str, Any]:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in _cmd_out(["lscpu"]).splitlines()
            if line.startswith("Model name")
        ),
        platform.processor(),
    )
    path_python = shutil.which("python3")
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "label": opts.label,
        "quick": opts.quick,
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "kernel": platform.release(),
        "nginx": _cmd_out([upstream.nginx_path() or "nginx", "-v"]).removeprefix("nginx version: "),
        # "wrk debian/4.1.0-3+b2 [epoll] Copyright ..." -> "wrk debian/4.1.0-3+b2"
        "wrk": " ".join(_cmd_out(["wrk", "-v"]).split()[:2]),
        "python_under_test": interpreter_info(opts.python),
        "python_debian_venv": interpreter_info(str(DEBIAN_VENV / "bin" / "python"))
        if (DEBIAN_VENV / "bin" / "python").exists()
        else None,
        "python3_on_path": interpreter_info(path_python) if path_python else None,
        "options": {
            "duration_s": opts.duration,
            "repeats": opts.repeats,
            "connections": opts.connections,
            "configs": opts.configs,
            "paths": opts.paths,
            "sections": opts.sections,
            "warmup_s": opts.warmup,
            "pinning": (
                f"proxy on core {PROXY_CPU}; upstream nginx, wrk and harness on core {LOAD_CPU}"
            )
            if opts.pin
            else "none",
            "wrk": "wrk -t1 -cN -dDs --latency --timeout 10s",
        },
    }


def _csv(kind: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    return lambda text: [kind(x.strip()) for x in text.split(",") if x.strip()]


def parse_args(argv: Sequence[str] | None) -> Options:
    p = argparse.ArgumentParser(
        prog="bench/run", description=__doc__.splitlines()[0] if __doc__ else None
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="CI smoke: 1 s runs, 1 repeat, 32 conns, throughput matrix only",
    )
    p.add_argument("--duration", type=int, help="seconds per wrk run (default 5)")
    p.add_argument("--repeats", type=int, help="repeats per cell, median reported (default 3)")
    p.add_argument("--connections", type=_csv(int), help="default 1,32,128")
    p.add_argument(
        "--only",
        type=_csv(str),
        help=f"configurations, from {','.join(MAIN_CONFIGS + EXTRA_CONFIGS + OPTIONAL_CONFIGS)} "
        "(default all but bare-edge; bare-debian runs on /ok only)",
    )
    p.add_argument(
        "--paths",
        type=_csv(str),
        help=f"default {','.join(PATHS)}; also {','.join(OPTIONAL_PATHS)} when named",
    )
    p.add_argument("--sections", type=_csv(str), help=f"default {','.join(SECTIONS)}")
    p.add_argument("--warmup", type=int, help="seconds of warm-up per config and path (default 2)")
    p.add_argument("--no-pin", action="store_true", help="do not pin with taskset")
    p.add_argument(
        "--python",
        default=sys.executable,
        help="interpreter for mend and the bare proxy (default: the one running the harness, "
        "which bench/run takes from .venv)",
    )
    p.add_argument(
        "--footprint-python",
        help="interpreter for the footprint section's mend and bare proxy (default: "
        "bench/.venv-image, built once by bench/make-image-venv as the Docker image installs "
        "mend; --python's when it cannot be built)",
    )
    p.add_argument("--out", type=Path, help="results JSON (default bench/results/<ts>.json)")
    p.add_argument(
        "--write-readme", action="store_true", help="replace the results section of bench/README.md"
    )
    p.add_argument("--label", default="", help="free text stored with the results")
    a = p.parse_args(argv)
    quick = bool(a.quick)
    configs = a.only or [*MAIN_CONFIGS, *EXTRA_CONFIGS]
    unknown = set(configs) - set(MAIN_CONFIGS + EXTRA_CONFIGS + OPTIONAL_CONFIGS)
    if unknown:
        p.error(f"unknown configuration(s) {sorted(unknown)}")
    paths = a.paths or list(PATHS)
    if unknown_paths := set(paths) - set(PATHS + OPTIONAL_PATHS):
        p.error(f"unknown path(s) {sorted(unknown_paths)}")
    sections = a.sections or (["matrix"] if quick else list(SECTIONS))
    if set(sections) - set(SECTIONS):
        p.error(f"unknown section(s) {sorted(set(sections) - set(SECTIONS))}")
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return Options(
        duration=a.duration or (1 if quick else 5),
        repeats=a.repeats or (1 if quick else 3),
        connections=a.connections or ([32] if quick else [1, 32, 128]),
        configs=configs,
        paths=paths,
        sections=sections,
        warmup=a.warmup if a.warmup is not None else (0 if quick else 2),
        pin=not a.no_pin and (os.cpu_count() or 1) >= 2,
        python=a.python,
        out=a.out or BENCH / "results" / f"{stamp}.json",
        write_readme=a.write_readme,
        label=a.label or ("smoke run (--quick)" if quick else ""),
        quick=quick,
        footprint_python=a.footprint_python,
    )


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv)
    missing = [tool for tool in ("wrk",) if shutil.which(tool) is None]
    if upstream.nginx_path() is None:
        missing.append("nginx")
    if opts.pin and shutil.which("taskset") is None:
        missing.append("taskset")
    if missing:
        print(
            f"bench: missing {', '.join(missing)} (apt-get install -y nginx wrk util-linux)",
            file=sys.stderr,
        )
        return 2
    # SIGTERM (CI timeouts, kill) must still run the finally that stops every server.
    signal.signal(signal.SIGTERM, _interrupt)
    if opts.pin:
        # The harness polls and samples; keep that off the proxy's core.
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {int(LOAD_CPU)})
    harness = Harness(opts)
    try:
        results = harness.run()
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        return 130
    finally:
        harness.close()
    results["ratios"] = ratios(results.get("summary") or {})
    if results.get("failed"):
        print(f"bench: failed sections: {', '.join(results['failed'])}", file=sys.stderr)
    results["targets"] = [
        dict(zip(("target", "measured", "verdict"), row, strict=True))
        for row in report.targets(results)
    ]
    if results.get("footprint"):
        results["footprint"]["figures"] = report.footprint_figures(results)
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(results, indent=2) + "\n")
    markdown = report.render(results)
    print(markdown)
    if opts.write_readme:
        report.update_readme(BENCH / "README.md", markdown)
    print(f"[bench] results written to {opts.out}", file=sys.stderr)
    return 1 if results.get("failed") else 0


if __name__ == "__main__":
    sys.exit(main())
