"""The official MCP conformance suite, ``@modelcontextprotocol/conformance`` 0.1.16, run direct
and through mend (issue 38): what runs, and how a run through mend is held to the direct one.

Client scenarios (the suite plays an MCP server, and for ``auth/*`` an authorization server too)
run one ``conformance client --scenario`` each, a few at a time, with a client's command, direct
or behind ``through_mend.py`` (a mend per scenario, in front of the scenario's MCP server only).
Server scenarios run as one ``conformance server --suite all`` against an SDK's everything
server, direct, and again against a second instance of it behind one mend. Every run writes the
suite's ``checks.json`` files (``-o``); they are what is compared. A scenario that does not pass
in the batch is run once more under less load, as the python-sdk's CI does (the batch's load can
push a timed check past its tolerance): a real failure fails again. The summary table names each
scenario run again and what it did in the batch.

Everything is on loopback: servers and mends on free 127.0.0.1 ports, reached by the
``localhost`` name (the DNS-rebinding scenario needs it), each stopped by its PID.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.through_mend import (
    die_with_parent,
    free_port,
    running_mend,
    stop,
)
from tests.installs import npm_installed

HERE = Path(__file__).resolve().parent
VERSION = "0.1.16"
#: Node 22, from npm's ``node`` package (the system's node is 20)
NODE = HERE / "node_modules" / ".bin" / "node"
CLI = HERE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
VENDOR = HERE / "vendor"
THROUGH_MEND = HERE / "through_mend.py"

#: the suite's ``--timeout`` for one client (ms); ``through_mend.py`` gives up on it at 80 s
CLIENT_TIMEOUT_MS = 90_000
#: one ``conformance`` process (a client scenario; a whole server suite takes seconds)
RUN_TIMEOUT_S = 180.0
#: an SDK server to listen
START_TIMEOUT_S = 60.0
#: client scenarios run at once (each is a client, a scenario server, perhaps a mend)
PARALLEL = 4
#: and those run again after failing in the batch (a timed check is judged under less load)
PARALLEL_AGAIN = 2
PROBLEMS = ("FAILURE", "WARNING")

#: ``conformance list --client`` of 0.1.16: the scenarios that test a client
CLIENT_SCENARIOS = (
    "initialize",
    "tools_call",
    "elicitation-sep1034-client-defaults",
    "sse-retry",
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/client-credentials-jwt",
    "auth/client-credentials-basic",
    "auth/cross-app-access-complete-flow",
)
#: ``conformance list --server`` of 0.1.16 (``--suite all``: the pending ones too)
SERVER_SCENARIOS = (
    "server-initialize",
    "logging-set-level",
    "ping",
    "completion-complete",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-with-logging",
    "tools-call-error",
    "tools-call-with-progress",
    "tools-call-sampling",
    "tools-call-elicitation",
    "json-schema-2020-12",
    "elicitation-sep1034-defaults",
    "server-sse-polling",
    "server-sse-multiple-streams",
    "elicitation-sep1330-enums",
    "resources-list",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "resources-subscribe",
    "resources-unsubscribe",
    "prompts-list",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
    "dns-rebinding-protection",
)


@dataclass(frozen=True)
class Client:
    """A client the suite runs: its command, in words without spaces (the suite splits on them)."""

    label: str
    argv: tuple[str, ...]


@dataclass(frozen=True)
class Server:
    """An SDK's everything server: its command given the port, and its environment."""

    label: str
    argv: Callable[[int], list[str]]
    env: Callable[[int], dict[str, str]]


CLIENTS = {
    "typescript": Client(
        "TypeScript SDK everything-client (conformance v0.1.16)",
        (
            str(NODE),
            "--import",
            "tsx",
            str(VENDOR / "examples" / "clients" / "typescript" / "everything-client.ts"),
        ),
    ),
    "python": Client(
        "Python SDK conformance client (mcp 2.x)",
        (sys.executable, str(HERE / "python_sdk" / "conformance_client.py")),
    ),
}

SERVERS = {
    "typescript": Server(
        "TypeScript SDK everything-server (conformance v0.1.16)",
        lambda port: [
            str(NODE),
            "--import",
            "tsx",
            "--import",
            (HERE / "bind_loopback.mjs").as_uri(),
            str(VENDOR / "examples" / "servers" / "typescript" / "everything-server.ts"),
        ],
        lambda port: {"PORT": str(port)},
    ),
    "python": Server(
        "Python SDK everything-server (mcp 2.x)",
        lambda port: [
            sys.executable,
            str(HERE / "python_sdk" / "everything_server.py"),
            "--port",
            str(port),
        ],
        lambda port: {},
    ),
}


def ready() -> str | None:
    """Why the suite cannot run, or ``None``: its pinned npm packages installed once."""
    why = npm_installed(HERE)
    if why is None and not NODE.exists():
        why = f"{NODE} is missing after npm ci (npm's node package)"
    return why


def slug(scenario: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", scenario)


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "NO_COLOR": "1", **extra}


@dataclass
class Outcome:
    """One scenario's run: the suite's checks (``None``: it wrote none) and where they are."""

    scenario: str
    checks: list[dict[str, Any]] | None
    results: Path
    why: str = ""
    mend_log: Path | None = None
    #: this is a run again; the batch's own run of the scenario
    in_batch: Outcome | None = None

    @property
    def passed(self) -> bool:
        """No check failed or warned (the suite's own verdict on a client, less its exit code)."""
        return self.checks is not None and not self.problems()

    def problems(self) -> list[dict[str, Any]]:
        return [c for c in self.checks or () if c.get("status") in PROBLEMS]

    def succeeded(self) -> set[str]:
        return {str(c["id"]) for c in self.checks or () if c.get("status") == "SUCCESS"}

    @property
    def compared(self) -> bool:
        """Whether this (direct) run holds mend to something: it wrote checks, and some passed
        or none failed."""
        if self.checks is None:
            return False
        return bool(self.succeeded()) or not any(c.get("status") == "FAILURE" for c in self.checks)

    def verdict(self) -> str:
        if self.checks is None:
            return f"wrote no checks.json ({self.why})"
        return "passed" if self.passed else f"{len(self.problems())} checks failed or warned"


def _read(directory: Path) -> list[dict[str, Any]]:
    checks: list[dict[str, Any]] = json.loads(
        (directory / "checks.json").read_text(encoding="utf-8")
    )
    return checks


_STAMPED = re.compile(r"^(?P<name>.+)-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z$")


def _results(out: Path, prefix: str = "") -> dict[str, Path]:
    """Scenario -> its newest result directory under ``out`` (``<prefix><name>-<timestamp>``;
    an ``auth/...`` scenario's is under ``auth/``)."""
    found: dict[str, Path] = {}
    for checks in sorted(out.glob("**/checks.json")):
        relative = checks.parent.relative_to(out).as_posix()
        if (match := _STAMPED.match(relative)) and match["name"].startswith(prefix):
            found[match["name"].removeprefix(prefix)] = checks.parent
    return found


def _conformance(args: list[str], log: Path, env: dict[str, str]) -> str:
    """Run ``conformance ARGS`` (its output to ``log``); what went wrong, or ``""``. Its own
    process group, so a timeout stops the clients and servers it started too."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(NODE), str(CLI), *args],
            cwd=HERE,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent(),  # noqa: PLW1509 (one prctl call, see there)
        )
        try:
            proc.wait(RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            stop(proc, group=True)
            return f"conformance ran past {RUN_TIMEOUT_S} s; its output {log}"
        finally:
            stop(proc, group=True)
    return ""


# -- client scenarios --------------------------------------------------------------------------


def run_client_scenario(client: Client, scenario: str, out: Path, *, mended: bool) -> Outcome:
    """One client scenario, direct or through mend, its results under ``out/<scenario>``."""
    where = out / slug(scenario)
    where.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, str(THROUGH_MEND), *client.argv] if mended else list(client.argv)
    args = ["client", "--command", " ".join(argv), "--scenario", scenario]
    args += ["--timeout", str(CLIENT_TIMEOUT_MS), "-o", str(where)]
    logs = out / "mend-logs"
    why = _conformance(args, where / "conformance.log", _env(MEND_CONFORMANCE_LOGS=str(logs)))
    found = _results(where)
    mend_log = logs / f"{slug(scenario)}.mend.log" if mended else None
    if scenario not in found:
        why = why or f"see {where / 'conformance.log'}"
        return Outcome(scenario, None, where, why, mend_log)
    return Outcome(scenario, _read(found[scenario]), found[scenario], why, mend_log)


@dataclass
class Worse:
    """What a scenario does worse through mend: checks that fail or warn there only, and the
    ids of checks that pass direct and not through mend."""

    new: list[dict[str, Any]]
    lost: set[str]


@dataclass
class Batch:
    """One client's or server's scenarios, direct and through mend."""

    name: str
    label: str
    out: Path
    direct: dict[str, Outcome] = field(default_factory=dict)
    mended: dict[str, Outcome] = field(default_factory=dict)
    seconds: float = 0.0

    def regressions(self) -> list[str]:
        """The scenarios worse through mend than direct."""
        return [s for s in self.direct if self.worse(s)]

    def worse(self, scenario: str) -> Worse | None:
        """How ``scenario`` is worse through mend, if it is (and was compared)."""
        direct, mended = self.direct[scenario], self.mended[scenario]
        if not direct.compared:
            return None
        known = {str(c.get("id")) for c in direct.problems()}
        new = [c for c in mended.problems() if str(c.get("id")) not in known]
        lost = direct.succeeded() - mended.succeeded()
        if mended.checks is None or new or lost:
            return Worse(new, lost)
        return None

    def again(self) -> list[Outcome]:
        """The runs again of scenarios that did not pass in the batch."""
        return [o for t in (self.direct, self.mended) for o in t.values() if o.in_batch]

    def run_again(
        self, direct: Callable[[str], Outcome], mended: Callable[[str], Outcome], parallel: int
    ) -> None:
        """Each scenario that did not pass in the batch, once more (``parallel`` at once): direct
        first, then through mend each that passes direct."""
        failed = [s for s, o in self.direct.items() if not o.passed]
        self._again(self.direct, direct, failed, parallel)
        self._again(self.mended, mended, self.regressions(), parallel)

    @staticmethod
    def _again(
        table: dict[str, Outcome],
        again: Callable[[str], Outcome],
        scenarios: list[str],
        parallel: int,
    ) -> None:
        with ThreadPoolExecutor(parallel) as pool:
            for scenario, outcome in zip(scenarios, pool.map(again, scenarios), strict=True):
                outcome.in_batch = table[scenario]
                table[scenario] = outcome

    def row(self) -> list[str]:
        direct = sum(o.passed for o in self.direct.values())
        mended = sum(o.passed for o in self.mended.values())
        checks = [sum(len(o.succeeded()) for o in t.values()) for t in (self.direct, self.mended)]
        return [
            self.name,
            str(len(self.direct)),
            str(direct),
            str(mended),
            str(len(self.regressions())),
            f"{checks[0]} / {checks[1]}",
            str(len(self.again())),
            f"{self.seconds:.0f}",
        ]


def client_batch(name: str, out: Path) -> Batch:
    """Every client scenario with client ``name``, direct and through mend, ``PARALLEL`` at once;
    then each that did not pass, ``PARALLEL_AGAIN`` at once."""
    client = CLIENTS[name]
    batch = Batch(f"client: {name}", client.label, out)
    started = time.monotonic()
    runs = [(s, mended) for mended in (False, True) for s in CLIENT_SCENARIOS]
    with ThreadPoolExecutor(PARALLEL) as pool:
        done = pool.map(
            lambda run: run_client_scenario(
                client, run[0], out / ("mended" if run[1] else "direct"), mended=run[1]
            ),
            runs,
        )
        for (scenario, mended), outcome in zip(runs, done, strict=True):
            (batch.mended if mended else batch.direct)[scenario] = outcome
    batch.run_again(
        lambda s: run_client_scenario(client, s, out / "direct-again", mended=False),
        lambda s: run_client_scenario(client, s, out / "mended-again", mended=True),
        PARALLEL_AGAIN,
    )
    batch.seconds = time.monotonic() - started
    return batch


# -- server scenarios --------------------------------------------------------------------------


@dataclass
class RunningServer:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://localhost:{self.port}/mcp"


def _listening(server: RunningServer, deadline: float) -> None:
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            tail = server.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the server exited with {server.proc.returncode}:\n{tail}")
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"the server did not listen on {server.port} in {START_TIMEOUT_S} s")


@contextmanager
def running_server(server: Server, log: Path) -> Iterator[RunningServer]:
    """``server`` on a free 127.0.0.1 port, listening; stopped by its PID on exit."""
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            server.argv(port),
            cwd=HERE,
            env=_env(**server.env(port)),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent(),  # noqa: PLW1509 (one prctl call, see there)
        )
    running = RunningServer(proc, port, log)
    try:
        _listening(running, time.monotonic() + START_TIMEOUT_S)
        yield running
    finally:
        stop(proc)


def run_server_scenarios(
    url: str, out: Path, scenario: str | None = None, mend_log: Path | None = None
) -> dict[str, Outcome]:
    """The server scenarios against ``url``: all (``--suite all``, one after the other in one
    process), or ``scenario``."""
    out.mkdir(parents=True, exist_ok=True)
    which = ["--suite", "all"] if scenario is None else ["--scenario", scenario]
    why = _conformance(
        ["server", "--url", url, *which, "-o", str(out)], out / "conformance.log", _env()
    )
    found = _results(out, "server-")
    missing = why or f"see {out / 'conformance.log'}"
    outcomes = {}
    for name in SERVER_SCENARIOS if scenario is None else (scenario,):
        if name in found:
            outcomes[name] = Outcome(name, _read(found[name]), found[name], why, mend_log)
        else:
            outcomes[name] = Outcome(name, None, out, missing, mend_log)
    return outcomes


def _alone(url: str, out: Path, scenario: str, mend_log: Path | None = None) -> Outcome:
    return run_server_scenarios(url, out / slug(scenario), scenario, mend_log)[scenario]


def server_batch(name: str, out: Path) -> Batch:
    """Every server scenario against SDK ``name``'s server, direct and through mend (two
    instances, so neither run sees the other's state); then each that did not pass, alone."""
    server = SERVERS[name]
    batch = Batch(f"server: {name}", server.label, out)
    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        direct = stack.enter_context(running_server(server, out / "server-direct.log"))
        behind = stack.enter_context(running_server(server, out / "server-behind-mend.log"))
        mend_log = out / "mend.log"
        mend = stack.enter_context(running_mend(f"http://localhost:{behind.port}", mend_log))
        mended_url = f"{mend.origin}/mcp"
        with ThreadPoolExecutor(2) as pool:
            direct_run = pool.submit(run_server_scenarios, direct.url, out / "direct")
            mended_run = pool.submit(
                run_server_scenarios, mended_url, out / "mended", None, mend_log
            )
            batch.direct, batch.mended = direct_run.result(), mended_run.result()
        # one at a time: the runs share the server
        batch.run_again(
            lambda s: _alone(direct.url, out / "direct-again", s),
            lambda s: _alone(mended_url, out / "mended-again", s, mend_log),
            1,
        )
    batch.seconds = time.monotonic() - started
    return batch


# -- what is reported --------------------------------------------------------------------------


def listed(kind: str) -> list[str]:
    """``conformance list --<kind>``: the scenario names, as the installed suite has them."""
    done = subprocess.run(
        [str(NODE), str(CLI), "list", f"--{kind}"],
        cwd=HERE,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return re.findall(r"^\s+- (\S+)", done.stdout, re.MULTILINE)


def _message(check: dict[str, Any]) -> str:
    """A check's ``errorMessage``; its description when it has none (a check the scenario
    expected and never saw has only that: "Expected Check Missing: <id>")."""
    return str(check.get("errorMessage") or check.get("description") or "-")


def _check_line(check: dict[str, Any]) -> str:
    details = json.dumps(check.get("details"), ensure_ascii=False)
    if len(details) > 600:
        details = details[:600] + "…"
    return f"  {check.get('status')} {check.get('id')}: {_message(check)}\n      details: {details}"


def regression(batch: Batch, scenario: str, worse: Worse) -> str:
    """What the assertion says: the checks that fail through mend only, and where to look."""
    direct, mended = batch.direct[scenario], batch.mended[scenario]
    lines = [
        f"{scenario} ({batch.name}) is worse through mend than direct"
        f" (direct: {direct.verdict()}; through mend: {mended.verdict()})"
    ]
    lines += [_check_line(c) for c in worse.new]
    if worse.lost:
        lines.append(f"  passed direct, not through mend: {', '.join(sorted(worse.lost))}")
    if mended.why:
        lines.append(f"  {mended.why}")
    lines.append(f"  results: {mended.results}")
    lines.append(f"  mend log: {mended.mend_log}")
    return "\n".join(lines)


def direct_failure(batch: Batch, scenario: str) -> str:
    """Why a scenario is not compared: direct, a check failed and none passed (or no checks)."""
    direct = batch.direct[scenario]
    problems = "; ".join(f"{c.get('id')}: {_message(c)}" for c in direct.problems())
    return f"fails direct ({batch.name}: {direct.verdict()}): {problems[:500]} ({direct.results})"


def summary(batches: list[Batch]) -> str:
    """The pass counts, direct vs through mend, one row a batch; then each regression."""
    head = [
        "batch",
        "scenarios",
        "pass direct",
        "pass via mend",
        "worse via mend",
        "checks ok direct / via mend",
        "run again",
        "s",
    ]
    rows = [head, *(b.row() for b in batches)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in rows]
    for batch in batches:
        lines.append(f"{batch.name}: {batch.label}; results {batch.out}")
        for scenario in batch.regressions():
            worse = batch.worse(scenario)
            assert worse is not None
            ids = [str(c.get("id")) for c in worse.new] + sorted(worse.lost)
            lines.append(f"  worse through mend: {scenario} [{', '.join(dict.fromkeys(ids))}]")
        for outcome in batch.again():
            first = outcome.in_batch
            assert first is not None
            way = "through mend" if outcome.mend_log else "direct"
            said = ", ".join(str(c.get("id")) for c in first.problems()) or first.why
            lines.append(
                f"  run again {way}: {outcome.scenario}: {outcome.verdict()};"
                f" in the batch {first.verdict()} [{said}]"
            )
    return "\n".join(lines)


BATCHES = pytest.StashKey[list[Batch]]()


class Runs:
    """The batches this process has taken; a batch that broke breaks each test that needs it
    (it is not taken again)."""

    def __init__(self, out: Path, config: pytest.Config) -> None:
        self.out = out
        self.config = config
        self.taken: dict[str, Batch | Exception] = {}

    def _take(self, key: str, take: Callable[[str, Path], Batch], name: str) -> Batch:
        if key not in self.taken:
            try:
                self.taken[key] = batch = take(name, self.out / key.replace(": ", "-"))
                self.config.stash.setdefault(BATCHES, []).append(batch)
            except Exception as error:
                self.taken[key] = error
        taken = self.taken[key]
        if isinstance(taken, Exception):
            raise RuntimeError(f"the conformance batch {key} broke: {taken}") from taken
        return taken

    def client(self, name: str) -> Batch:
        """Every client scenario with client ``name``, direct and through mend."""
        return self._take(f"client: {name}", client_batch, name)

    def server(self, name: str) -> Batch:
        """Every server scenario against SDK ``name``'s server, direct and through mend."""
        return self._take(f"server: {name}", server_batch, name)


def assert_no_worse(batch: Batch, scenario: str) -> None:
    """Through mend, no check fails or warns that did not direct, and every check that passes
    direct passes (so a scenario passing direct passes through mend); a scenario in which a
    check failed direct and none passed is skipped, saying why."""
    if not batch.direct[scenario].compared:
        pytest.skip(direct_failure(batch, scenario))
    worse = batch.worse(scenario)
    assert worse is None, regression(batch, scenario, worse)
