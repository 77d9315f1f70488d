"""The agent-framework matrix: which frameworks, which servers, which cases, and what each
framework handed its model, direct and through mend.

A framework's runner (``tests/agents/runners/<name>_runner.py``) runs in the framework's own
virtualenv (``tests.agents.envs``) as a subprocess, once per (framework, server, direct or
through mend) with every case of that server on its command line. Through mend means a fresh
``mend run --upstream <server>`` for that framework alone, as a user would start it: mend
remembers failures per session (docs/contract.md §7), and stateless MCP clients on one loopback
address
would otherwise share one session across frameworks.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from tests.agents import envs
from tests.agents.servers import Served, free_port, serve
from tests.mcp_servers import sdk1_site

HERE = Path(__file__).resolve().parent
RUNNERS = HERE / "runners"
CASES = HERE / "cases.yaml"
#: seconds one runner may take for all of one server's cases (each call has 60 s of its own)
BATCH_TIMEOUT_S = 300
ROUTES = ("direct", "mend")
#: the envelope's key in ``_meta``, quoted as JSON or a Python repr shows it (the docs_url's
#: ``/_mend/errors/`` is no sign of it)
META = r"""["']mend/error["']"""


@dataclass(frozen=True)
class Framework:
    """An agent framework: its environment, its runner, and whether it raises on ``isError``
    by design (the fastmcp ``Client``: then raising ``ToolError`` is how it hands over a result)."""

    name: str
    runner: str
    env: dict[str, str] = field(default_factory=dict)
    raises_on_is_error: bool = False


FRAMEWORKS: dict[str, Framework] = {
    f.name: f
    for f in (
        Framework("pydantic-ai", "pydantic_ai_runner.py"),
        Framework(
            "openai-agents", "openai_agents_runner.py", {"OPENAI_AGENTS_DISABLE_TRACING": "1"}
        ),
        Framework("langgraph", "langgraph_runner.py", {"LANGCHAIN_TRACING_V2": "false"}),
        # google-auth would look for Application Default Credentials (and a metadata server)
        # to set up mTLS to the MCP server: off, nothing leaves loopback
        Framework(
            "google-adk",
            "google_adk_runner.py",
            {"GOOGLE_API_USE_CLIENT_CERTIFICATE": "false", "NO_GCE_CHECK": "True"},
        ),
        Framework("llama-index", "llama_index_runner.py"),
        Framework("fastmcp", "fastmcp_runner.py", raises_on_is_error=True),
    )
}
#: the exception type the fastmcp Client raises for an isError result
IS_ERROR_RAISE = "ToolError"


@dataclass(frozen=True)
class Case:
    """One way a tool fails, on one server: the call, and what the model must (not) read."""

    id: str
    server: str
    about: str
    tool: str
    arguments: dict[str, Any]
    facts: dict[str, str]
    misdirections: dict[str, str]

    @property
    def key(self) -> str:
        return f"{self.server}-{self.id}"


@dataclass(frozen=True)
class RegexCheck:
    """Advice a case's misdirection regex must catch, and advice it must spare."""

    case: str
    misdirection: str
    catches: tuple[str, ...]
    spares: tuple[str, ...]


def load_regex_checks(path: Path = CASES) -> list[RegexCheck]:
    table = yaml.safe_load(path.read_text(encoding="utf-8"))
    return [
        RegexCheck(c["case"], c["misdirection"], tuple(c["catches"]), tuple(c["spares"]))
        for c in table["regex_checks"]
    ]


def load_cases(path: Path = CASES) -> tuple[list[Case], tuple[str, ...]]:
    """The table's cases (one per server each names) and the planted strings."""
    table = yaml.safe_load(path.read_text(encoding="utf-8"))
    patterns: dict[str, str] = table["patterns"]
    cases = []
    for case_id, spec in table["cases"].items():
        misdirections = {
            name: patterns.get(regex, regex) for name, regex in spec["misdirections"].items()
        }
        for server, call in spec["calls"].items():
            facts = {**spec["facts"], **call.get("facts", {})}
            cases.append(
                Case(
                    id=case_id,
                    server=server,
                    about=spec["about"],
                    tool=call["tool"],
                    arguments=call["arguments"],
                    facts={name: regex for name, regex in facts.items() if regex is not None},
                    misdirections=misdirections,
                )
            )
    return cases, tuple(table["leaks"])


@dataclass(frozen=True)
class Reading:
    """What one run handed the model: the tool-result text, and the exception it ended on."""

    model_read: str
    raised: str | None

    @property
    def raised_type(self) -> str | None:
        return None if self.raised is None else self.raised.split(":", 1)[0]


def found(regex: str, text: str) -> bool:
    return re.search(regex, text) is not None


def facts_in(case: Case, text: str) -> set[str]:
    """The names of the case's facts ``text`` states."""
    return {name for name, regex in case.facts.items() if found(regex, text)}


def misdirections_in(case: Case, text: str) -> dict[str, str]:
    """Each misdirection ``text`` holds, with the words that matched."""
    out = {}
    for name, regex in case.misdirections.items():
        match = re.search(regex, text)
        if match:
            out[name] = match.group(0)
    return out


def ended_on_exception(framework: Framework, reading: Reading) -> bool:
    """Whether the run ended on an exception instead of handing over a result (for the
    fastmcp Client, raising ``ToolError`` on an isError result is handing it over)."""
    if reading.raised is None:
        return False
    return not (framework.raises_on_is_error and reading.raised_type == IS_ERROR_RAISE)


@dataclass
class Servers:
    """The failing MCP servers' base URLs (their MCP endpoint is ``/mcp``), and where logs go."""

    urls: dict[str, str]
    logs: Path


@contextmanager
def running_servers(logs: Path) -> Iterator[Servers]:
    """The SDK 2.x shop, the SDK 1.x shop, the REST app and its FastMCP OpenAPI server."""
    python = sys.executable
    site = str(sdk1_site())
    fastmcp = str(envs.python("fastmcp"))
    with ExitStack() as stack:
        sdk2 = stack.enter_context(
            serve("sdk2", lambda p: [python, "-m", "tests.agents.servers", str(p)], logs)
        )
        sdk1 = stack.enter_context(
            serve(
                "sdk1",
                lambda p: [python, str(HERE / "sdk1_failing_server.py"), str(p)],
                logs,
                env={"PYTHONPATH": site},
            )
        )
        rest = stack.enter_context(
            serve("rest", lambda p: [python, "-m", "tests.agents.rest_app", str(p)], logs)
        )
        openapi = stack.enter_context(
            serve(
                "openapi",
                lambda p: [fastmcp, str(HERE / "openapi_server.py"), rest.url, str(p)],
                logs,
            )
        )
        yield Servers({s.name: s.url for s in (sdk2, sdk1, openapi)}, logs)


@contextmanager
def mend_in_front(upstream: str, name: str, logs: Path) -> Iterator[Served]:
    """``mend run --upstream`` with its defaults, on free loopback ports."""

    def argv(port: int) -> list[str]:
        admin = f"127.0.0.1:{free_port()}"
        return [
            sys.executable,
            *("-m", "proxy", "run", "--upstream", upstream, "--no-watch"),
            *("--listen", f"127.0.0.1:{port}", "--admin-listen", admin),
        ]

    with serve(f"mend-{name}", argv, logs) as mend:
        yield mend


def run_batch(framework: Framework, url: str, cases: list[Case], log: Path) -> list[Reading]:
    """The framework's runner on ``url`` (an MCP endpoint) for ``cases``: one reading each."""
    argv = [str(envs.python(framework.name)), str(RUNNERS / framework.runner), url]
    for case in cases:
        argv += [case.tool, json.dumps(case.arguments)]
    env = {**os.environ, **framework.env, "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONPATH", None)
    with log.open("ab") as err:
        done = subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=env,
            timeout=BATCH_TIMEOUT_S,
            check=False,
        )
    lines = [line for line in done.stdout.decode().splitlines() if line.startswith("{")]
    if done.returncode != 0 or len(lines) != len(cases):
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(
            f"{framework.name} runner exited {done.returncode} with {len(lines)} of "
            f"{len(cases)} readings:\n{tail}"
        )
    return [Reading(**json.loads(line)) for line in lines]


class Taken:
    """Readings by (framework, case key, route), taken on first need a batch at a time (one
    framework on one batch of cases, direct and through mend); a batch that failed is not tried
    again. Subclasses say what a batch is and how it is taken."""

    cases: list[Case]
    leaks: tuple[str, ...]
    readings: dict[tuple[str, str, str], Reading]
    #: (framework, batch) -> why its readings could not be taken
    broken: dict[tuple[str, str], str]
    frameworks: ClassVar[dict[str, Framework]] = FRAMEWORKS

    def batch(self, case: Case) -> str:
        return case.server

    def _take(self, framework: Framework, batch: str) -> None:
        raise NotImplementedError

    def reading(self, framework: str, case: Case, route: str) -> Reading:
        key, batch = (framework, case.key, route), self.batch(case)
        if key not in self.readings:
            if (framework, batch) in self.broken:
                raise RuntimeError(self.broken[(framework, batch)])
            try:
                self._take(self.frameworks[framework], batch)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                self.broken[(framework, batch)] = str(exc)
                raise
        return self.readings[key]

    def _keep(
        self, framework: Framework, cases: list[Case], direct: list[Reading], proxied: list[Reading]
    ) -> None:
        for case, d, p in zip(cases, direct, proxied, strict=True):
            self.readings[(framework.name, case.key, "direct")] = d
            self.readings[(framework.name, case.key, "mend")] = p

    def record(self) -> list[dict[str, Any]]:
        """Every (framework, case) taken: both texts, what was raised, the verdicts."""
        return recorded(self.readings, self.cases, self.frameworks, self.leaks)


@dataclass
class Matrix(Taken):
    """The MCP matrix: a batch is one server's cases."""

    servers: Servers
    cases: list[Case]
    leaks: tuple[str, ...]
    readings: dict[tuple[str, str, str], Reading] = field(default_factory=dict)
    broken: dict[tuple[str, str], str] = field(default_factory=dict)

    def _take(self, framework: Framework, server: str) -> None:
        cases = [c for c in self.cases if c.server == server]
        upstream = self.servers.urls[server]
        logs = self.servers.logs
        log = logs / f"{framework.name}-{server}.log"
        direct = run_batch(framework, f"{upstream}/mcp", cases, log)
        with mend_in_front(upstream, f"{framework.name}-{server}", logs) as mend:
            proxied = run_batch(framework, f"{mend.url}/mcp", cases, log)
        self._keep(framework, cases, direct, proxied)


def recorded(
    readings: dict[tuple[str, str, str], Reading],
    cases: list[Case],
    frameworks: dict[str, Framework],
    leaks: tuple[str, ...],
) -> list[dict[str, Any]]:
    """A matrix's rows: every (framework, case) taken, both texts, what was raised, verdicts."""
    rows = []
    for case in cases:
        for name, framework in frameworks.items():
            if (name, case.key, "mend") not in readings:
                continue
            direct = readings[(name, case.key, "direct")]
            proxied = readings[(name, case.key, "mend")]
            rows.append(
                {
                    "framework": name,
                    "server": case.server,
                    "case": case.id,
                    "direct": asdict(direct),
                    "mend": asdict(proxied),
                    **verdicts(framework, case, direct, proxied, leaks),
                }
            )
    return rows


def leaked(leaks: tuple[str, ...], text: str) -> list[str]:
    return [planted for planted in leaks if planted in text]


def verdicts(
    framework: Framework, case: Case, direct: Reading, proxied: Reading, leaks: tuple[str, ...]
) -> dict[str, Any]:
    """The matrix's judgement of one pair, as the tests judge it."""
    carried = facts_in(case, direct.model_read)
    kept = facts_in(case, proxied.model_read)
    return {
        "facts_direct": sorted(carried),
        "facts_mend": sorted(kept),
        "lost": sorted(carried - kept),
        "missing": sorted(set(case.facts) - kept),
        "misdirections": misdirections_in(case, proxied.model_read),
        "ended_on_exception": ended_on_exception(framework, proxied),
        "meta_reaches_model": found(META, proxied.model_read),
        "leaked": leaked(leaks, proxied.model_read),
        "leaked_direct": leaked(leaks, direct.model_read),
    }


def summary(rows: list[dict[str, Any]]) -> str:
    """Per framework: how many cases, how many fail each check through mend (a fact the direct
    text had is lost, a declared fact is missing, a misdirection, the run ended on an exception,
    a planted string leaked), how many ended on an exception or leaked direct, and in how many
    ``_meta["mend/error"]`` reached the model; then every failing pair."""
    heads = (
        "cases",
        "lost",
        "missing",
        "misdirect",
        "raised",
        "leaked",
        "raised-direct",
        "leaked-direct",
        "_meta",
    )
    per: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        per.setdefault(row["framework"], []).append(row)
    per["total"] = rows
    lines = [f"{'framework':<15}" + "".join(f"{h:>14}" for h in heads)]
    lines.append("-" * len(lines[0]))
    for name, group in per.items():
        cells = (
            len(group),
            sum(bool(r["lost"]) for r in group),
            sum(bool(r["missing"]) for r in group),
            sum(bool(r["misdirections"]) for r in group),
            sum(r["ended_on_exception"] for r in group),
            sum(bool(r["leaked"]) for r in group),
            sum(r["direct"]["raised"] is not None for r in group),
            sum(bool(r["leaked_direct"]) for r in group),
            sum(r["meta_reaches_model"] for r in group),
        )
        lines.append(f"{name:<15}" + "".join(f"{c:>14}" for c in cells))
    lines.append("")
    lines.append("failing (framework server case: what)")
    for row in rows:
        what = [
            *(f"lost {f}" for f in row["lost"]),
            *(f"missing {f}" for f in row["missing"] if f not in row["lost"]),
            *(f"misdirects {m}" for m in row["misdirections"]),
            *(["ended on " + str(row["mend"]["raised"])[:80]] if row["ended_on_exception"] else []),
            *(f"leaked {planted!r}" for planted in row["leaked"]),
        ]
        if what:
            lines.append(f"  {row['framework']} {row['server']} {row['case']}: {'; '.join(what)}")
    return "\n".join(lines)
