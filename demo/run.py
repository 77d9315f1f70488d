"""``python -m demo.run``: the whole demo on one machine, no Docker, loopback only.

Starts the legacy orders API (in this process) and mend (a subprocess, on free ports, with a
generated config), shows a few raw-vs-envelope pairs, runs the scripted agent against the raw API
and through mend, prints both completion rates, runs it once more on the same API as MCP tools
(mend's ``mcp_tools``), prints a few of mend's metrics, and shuts everything down again, on Ctrl-C
too.

    python -m demo.run                  # the demo, about 15 seconds
    python -m demo.run --keep-running   # leave mend and the API up to explore
    python -m demo.run --requests 200   # traffic generator: loop the agent through mend
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import aiohttp
import yaml
from aiohttp import web

from demo.agent import Call, RunReport, default_tasks, format_report, run_agent
from demo.legacy_api import create_legacy_app
from demo.tool_agent import run_tool_agent

REPO = Path(__file__).resolve().parents[1]
DEMO_RULES = Path(__file__).resolve().parent / "rules.yaml"
DEMO_OPENAPI = Path(__file__).resolve().parent / "openapi.yaml"
#: mend's per-route read timeout; the API's slow report takes longer so the timeout is visible.
READ_TIMEOUT_S = 2.0
SLOW_SECONDS = 3.0
#: where mend serves the API's documented operations as MCP tools (the API has its own /mcp)
TOOLS_PATH = "/tools/mcp"
SHOWN_HEADERS = (
    "Content-Type",
    "Server",
    "X-Powered-By",
    "Retry-After",
    "WWW-Authenticate",
    "X-Error-Code",
    "X-Request-ID",
    "X-Mend-Attempt-Count",
)


@dataclass(frozen=True)
class Showcase:
    title: str
    call: Call


SHOWCASES = (
    Showcase(
        "Spring Boot 500: a stack trace, SQL text and a database password in the body",
        Call("GET", "/api/orders/17/invoice"),
    ),
    Showcase(
        "FastAPI 422: which field, and what to send instead",
        Call("POST", "/api/orders", {"sku": "WIDGET-1", "qty": -1}),
    ),
    Showcase(
        "DRF 400: the API says the choice is invalid; its OpenAPI document says which are valid",
        Call("POST", "/api/drf/orders", {"sku": "widget-1", "quantity": 1}),
    ),
    Showcase(
        "nginx 503: an HTML page from the load balancer; mend sends the GET again (its retries,"
        " docs/retries.md) and the agent gets the 200",
        Call("GET", "/api/catalog"),
    ),
    Showcase(
        "409 from the API's own business rule, explained by demo/rules.yaml",
        Call("POST", "/api/orders/17/ship"),
    ),
)


class Printer:
    """Plain text for pipes and CI logs; a little bold and colour on a terminal."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self.color = out.isatty() and "NO_COLOR" not in os.environ

    def line(self, text: str = "") -> None:
        print(text, file=self._out, flush=True)

    def heading(self, text: str) -> None:
        self.line()
        self.line(f"\033[1m{text}\033[0m" if self.color else text)
        self.line("-" * len(text))

    def dim(self, text: str) -> str:
        return f"\033[2m{text}\033[0m" if self.color else text


def free_port() -> int:
    # Another process could take the port before mend binds it; on loopback that is rare enough.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def write_config(directory: Path, *, api_url: str, listen: str, admin_listen: str) -> Path:
    config = {
        "listen": listen,
        "admin_listen": admin_listen,
        "rules": [],
        "retry_after_default_ms": 1000,
        # the default policy (two tries on a refused connection, a reset, 503, 429), with the
        # tries made shown in X-Mend-Attempt-Count
        "retries": {"attempt_count_header": True},
        "routes": [
            {
                "name": "legacy",
                "prefix": "/",
                "upstream": api_url,
                "rules": [str(DEMO_RULES)],
                "openapi": str(DEMO_OPENAPI),
                "rendering": "json",
                "status": "upstream",
                "connect_timeout": 5,
                "read_timeout": READ_TIMEOUT_S,
                # the API's documented operations as MCP tools (demo/tool_agent.py)
                "mcp_tools": TOOLS_PATH,
            }
        ],
    }
    path = directory / "mend-demo.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@contextlib.asynccontextmanager
async def legacy_api(host: str = "127.0.0.1") -> AsyncIterator[str]:
    runner = web.AppRunner(create_legacy_app(slow_seconds=SLOW_SECONDS), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, 0).start()
        port = runner.addresses[0][1]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


class MendFailedToStart(RuntimeError):
    pass


@contextlib.asynccontextmanager
async def mend_process(config: Path, log_path: Path, admin_url: str) -> AsyncIterator[None]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
        ),
    }
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "proxy",
            "run",
            "--config",
            str(config),
            cwd=REPO,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
    try:
        await _wait_ready(proc, admin_url, log_path)
        yield
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def _wait_ready(proc: asyncio.subprocess.Process, admin_url: str, log_path: Path) -> None:
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if proc.returncode is not None:
                break
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(
                    f"{admin_url}/readyz", timeout=aiohttp.ClientTimeout(total=2)
                ) as resp:
                    if resp.status == 200:
                        return
            await asyncio.sleep(0.1)
    log = await asyncio.to_thread(log_path.read_text, errors="replace")
    tail = log.splitlines()[-20:]
    state = "still starting" if proc.returncode is None else f"exited with {proc.returncode}"
    raise MendFailedToStart(
        f"mend did not become ready ({state}); the end of {log_path.name}:\n  " + "\n  ".join(tail)
    )


@dataclass(frozen=True)
class Seen:
    status: int
    reason: str
    headers: dict[str, str]
    text: str


async def _fetch(session: aiohttp.ClientSession, call: Call, client: str) -> Seen:
    async with session.request(
        call.method,
        call.path,
        json=call.json,
        headers={"Accept": "application/json", "X-Client-Id": client},
    ) as resp:
        headers = {h: resp.headers[h] for h in SHOWN_HEADERS if h in resp.headers}
        return Seen(resp.status, resp.reason or "", headers, await resp.text(errors="replace"))


def _truncate(text: str, limit: int = 360) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def _raw_body(text: str, member_limit: int = 200) -> str:
    """A raw body for the eye: JSON objects one member per line, long values cut in the middle
    so that both the start of a stack trace and the end of a message (where a JDBC URL tends to
    sit) stay visible."""
    try:
        doc: Any = json.loads(text)
    except ValueError:
        return _truncate(text)
    if not isinstance(doc, dict):
        return _truncate(text)
    lines = []
    for key, value in doc.items():
        rendered = json.dumps(value, ensure_ascii=False)
        if len(rendered) > member_limit:
            half = member_limit // 2
            cut = len(rendered) - 2 * half
            rendered = f"{rendered[:half]} ...({cut} characters)... {rendered[-half:]}"
        lines.append(f"  {json.dumps(key)}: {rendered},")
    return "{\n" + "\n".join(lines).rstrip(",") + "\n}"


def _compact_envelope(text: str) -> str:
    """The envelope without its empty members, which are always there but say nothing here."""
    try:
        doc: Any = json.loads(text)
    except ValueError:
        return _truncate(text)
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        doc = {"error": {k: v for k, v in doc["error"].items() if v not in (None, [], {})}}
    return json.dumps(doc, indent=2, ensure_ascii=False)


async def show_pairs(printer: Printer, api_url: str, mend_url: str) -> None:
    printer.heading("1. The same failing request: raw upstream, then through mend")
    async with (
        aiohttp.ClientSession(base_url=api_url) as raw,
        aiohttp.ClientSession(base_url=mend_url) as mended,
    ):
        for number, show in enumerate(SHOWCASES, 1):
            body = "" if show.call.json is None else " " + json.dumps(show.call.json)
            printer.line()
            printer.line(f"({number}) {show.call.describe()}{body}")
            printer.line(printer.dim(f"    {show.title}"))
            # Separate client ids: the 503 is served once per client, and both sides should see it.
            for label, session, client in (
                ("raw upstream", raw, "showcase-raw"),
                ("through mend", mended, "showcase-mend"),
            ):
                seen = await _fetch(session, show.call, client)
                printer.line(f"  {label}: HTTP {seen.status} {seen.reason}")
                for name, value in seen.headers.items():
                    printer.line(f"    {name}: {value}")
                shown = (
                    _compact_envelope(seen.text)
                    if label == "through mend"
                    else _raw_body(seen.text)
                )
                for body_line in shown.splitlines():
                    printer.line(f"    {body_line}")


#: The call a looping agent keeps sending unchanged (it ignores ``fix_request``).
LOOPED = Call("POST", "/api/orders", {"sku": "WIDGET-1", "qty": 0})


async def show_loop(printer: Printer, mend_url: str) -> None:
    """An agent that resends the same invalid request: mend counts it across calls and, on
    the third time, tells it to stop (``escalate``)."""
    printer.heading("2. An agent that loops: the same invalid request, three times")
    printer.line(
        printer.dim(
            "mend remembers the session's failures (X-Agent-Session here); the third identical "
            "failure is escalate, with fix and stop spelled out."
        )
    )
    headers = {"Accept": "application/json", "X-Agent-Session": "looping-agent"}
    async with aiohttp.ClientSession(base_url=mend_url, headers=headers) as session:
        error: dict[str, Any] = {}
        for attempt in range(1, 4):
            async with session.post(LOOPED.path, json=LOOPED.json) as resp:
                error = (await resp.json())["error"]
            repeat = error.get("repeat") or {}
            printer.line(
                f"  ({attempt}) {LOOPED.describe()} {json.dumps(LOOPED.json)} -> HTTP "
                f"{resp.status} {error['code']}, action {error['action']}, "
                f"repeat {repeat.get('count', '-')}"
            )
    printer.line("  the third envelope says:")
    shown = {k: error.get(k) for k in ("action", "severity", "hint", "steps", "repeat")}
    for body_line in json.dumps(shown, indent=2, ensure_ascii=False).splitlines():
        printer.line(f"    {body_line}")


async def scrape_errors(admin_url: str, limit: int = 8) -> list[str]:
    async with aiohttp.ClientSession() as session, session.get(f"{admin_url}/metrics") as resp:
        text = await resp.text()
    lines = [ln for ln in text.splitlines() if ln.startswith("mend_errors_total{")]
    return lines[:limit]


def _rate_line(raw: RunReport, mended: RunReport) -> str:
    return (
        f"completion rate: raw {raw.completion_rate:.0%} ({raw.completed}/{len(raw.results)}), "
        f"through mend {mended.completion_rate:.0%} "
        f"({mended.completed}/{len(mended.results)})"
    )


async def run_demo(args: argparse.Namespace, printer: Printer) -> int:
    with tempfile.TemporaryDirectory(prefix="mend-demo-") as tmp:
        listen = f"127.0.0.1:{free_port()}"
        admin = f"127.0.0.1:{free_port()}"
        mend_url, admin_url = f"http://{listen}", f"http://{admin}"
        log_path = Path(tmp) / "mend.log"
        async with legacy_api(args.api_host) as api_url:
            config = write_config(Path(tmp), api_url=api_url, listen=listen, admin_listen=admin)
            printer.line("mend demo: a legacy orders API, a scripted agent, and mend in between")
            printer.line(f"  legacy API   {api_url}   (GET / lists its endpoints)")
            printer.line(f"  mend         {mend_url}   (forwards to the API, rewrites errors)")
            printer.line(f"  mend admin   {admin_url}/metrics")
            printer.line(f"  mend config  {config}")
            printer.line(f"  mend log     {log_path}   (one JSON line per request)")
            printer.line("starting mend...")
            try:
                async with mend_process(config, log_path, admin_url):
                    await _demo_body(args, printer, api_url, mend_url, admin_url)
                    if args.keep_running:
                        printer.line()
                        printer.line(f"mend is at {mend_url}, the raw API at {api_url}.")
                        printer.line(f"Try: curl -s {mend_url}/api/orders/17/invoice")
                        printer.line("Press Ctrl-C to stop.")
                        await asyncio.Event().wait()
            except MendFailedToStart as exc:
                printer.line(str(exc))
                return 1
    printer.line()
    printer.line("Stopped mend and the API (--keep-running leaves them up to explore).")
    return 0


async def _demo_body(
    args: argparse.Namespace, printer: Printer, api_url: str, mend_url: str, admin_url: str
) -> None:
    if args.requests is not None:
        await _generate_traffic(args.requests, printer, mend_url)
    else:
        await show_pairs(printer, api_url, mend_url)
        await show_loop(printer, mend_url)
        printer.heading(
            f"3. A scripted agent works {len(default_tasks())} tasks: raw, then through mend"
        )
        printer.line(
            printer.dim(
                "Raw, it can only send a failing call once more. Through mend it follows the "
                "envelope's action."
            )
        )
        raw, mended = await asyncio.gather(run_agent(api_url, "raw"), run_agent(mend_url, "mend"))
        printer.line()
        printer.line(format_report(raw, label="raw API", color=printer.color))
        printer.line()
        printer.line(format_report(mended, label="through mend", color=printer.color))
        printer.line()
        printer.line(_rate_line(raw, mended))
        await show_tools(printer, mend_url)
    printer.heading("5. Metrics")
    printer.line(f"Prometheus metrics: {admin_url}/metrics   (a few mend_errors_total lines:)")
    for metric in await scrape_errors(admin_url):
        printer.line(f"  {metric}")


async def show_tools(printer: Printer, mend_url: str) -> None:
    printer.heading("4. The same API as MCP tools: mend's mcp_tools, an MCP agent")
    printer.line(
        printer.dim(
            f"mend serves the API's OpenAPI operations as MCP tools at {TOOLS_PATH}; the agent "
            "speaks MCP (the official SDK) and reads the envelope in each failed tool result."
        )
    )
    report, tools = await run_tool_agent(mend_url + TOOLS_PATH)
    printer.line(f"{tools} tools listed")
    printer.line(format_report(report, label="MCP tools through mend", color=printer.color))


async def _generate_traffic(requests: int, printer: Printer, mend_url: str) -> None:
    printer.heading(f"Traffic: the agent through mend until {requests} requests were sent")
    sent = 0
    rounds = 0
    while sent < requests:
        report = await run_agent(mend_url, "mend")
        sent += report.requests_sent
        rounds += 1
        printer.line(
            f"round {rounds}: " + format_report(report, label="through mend", verbose=False)
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m demo.run",
        description="Run the mend demo: legacy API + mend + a scripted agent, all on loopback.",
    )
    parser.add_argument(
        "--keep-running",
        action="store_true",
        help="leave mend and the API running afterwards (Ctrl-C stops them)",
    )
    parser.add_argument(
        "--requests",
        type=int,
        default=None,
        metavar="N",
        help="traffic-generator mode: loop the agent through mend until N requests were sent",
    )
    parser.add_argument("--api-host", default="127.0.0.1", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    printer = Printer(sys.stdout)

    async def guarded() -> int:
        # Ctrl-C is handled by asyncio.run; SIGTERM (docker stop, CI) gets the same clean path.
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        if task is not None:
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(signal.SIGTERM, task.cancel)
        return await run_demo(args, printer)

    try:
        return asyncio.run(guarded())
    except (KeyboardInterrupt, asyncio.CancelledError):
        printer.line("stopped.")
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
