"""A scripted stand-in for an LLM agent working a task list against an HTTP API.

It has no knowledge of the API's error formats. Through mend (``mode="mend"``) it reads only the
envelope -- the REST one, or the one inside an answer in the protocol it spoke (a GraphQL error's
``extensions.mend``, an MCP tool result's ``_meta["mend/error"]``, a JSON-RPC error's ``data``) --
and does what the envelope says:

- ``retry``: wait ``retry_after_ms``, send the same request again;
- ``fix_request``: write a value the envelope offers (``suggested_value``, or one allowed by
  ``allowed_values``) at each ``field`` / ``invalid_fields[].field`` JSON Pointer, send again;
- ``call_other_operation``: call ``next_operation`` with ``next_operation_args``, then the original;
- ``reauthenticate``: get a token from ``POST /auth/token``, send again with it;
- ``escalate`` / ``report_bug``: stop and tell the human.

Against the raw API (``mode="raw"``) it does what agents do with an error they cannot parse: it
sends the same call once more and gives up. Attempts and total time are bounded either way.

    python -m demo.agent --base-url http://127.0.0.1:8080 --loop --interval 1
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import re
import secrets
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import aiohttp

from demo.legacy_api import CLIENT_ID, CLIENT_SECRET

Mode = Literal["raw", "mend", "tools"]
Outcome = Literal["completed", "escalated", "failed"]

# ---------------------------------------------------------------------------------------------
# RFC 6901 JSON Pointer


class PointerError(ValueError):
    """The pointer is malformed or names a location the document cannot have."""


def parse_pointer(pointer: str) -> list[str]:
    """Reference tokens of ``pointer``, unescaped (``~1`` -> ``/`` before ``~0`` -> ``~``)."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PointerError(f"pointer {pointer!r} must be empty or start with '/'")
    tokens = pointer[1:].split("/")
    for token in tokens:
        if re.search(r"~(?![01])", token):
            raise PointerError(f"pointer {pointer!r} has a '~' not followed by 0 or 1")
    return [t.replace("~1", "/").replace("~0", "~") for t in tokens]


def _index(token: str, length: int, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return length
    if not re.fullmatch(r"0|[1-9][0-9]*", token):
        raise PointerError(f"{token!r} is not an array index")
    index = int(token)
    if index > length or (index == length and not allow_end):
        raise PointerError(f"array index {index} is out of range")
    return index


def _child(node: Any, token: str) -> Any:
    if isinstance(node, dict):
        if token not in node:
            raise PointerError(f"no member {token!r}")
        return node[token]
    if isinstance(node, list):
        return node[_index(token, len(node), allow_end=False)]
    raise PointerError(f"cannot descend into {type(node).__name__} with {token!r}")


def get_pointer(document: Any, pointer: str) -> Any:
    """The value ``pointer`` names in ``document``; :class:`PointerError` when there is none."""
    node = document
    for token in parse_pointer(pointer):
        node = _child(node, token)
    return node


def set_pointer(document: Any, pointer: str, value: Any) -> Any:
    """A copy of ``document`` with ``value`` at ``pointer`` (RFC 6902 "add" semantics).

    The parent must exist; an object member is created or replaced, an array element replaced,
    and ``-`` (or the array's length) appends. The input is never mutated.
    """
    tokens = parse_pointer(pointer)
    if not tokens:
        return copy.deepcopy(value)
    result = copy.deepcopy(document)
    parent = result
    for token in tokens[:-1]:
        parent = _child(parent, token)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = copy.deepcopy(value)
    elif isinstance(parent, list):
        index = _index(last, len(parent), allow_end=True)
        if index == len(parent):
            parent.append(copy.deepcopy(value))
        else:
            parent[index] = copy.deepcopy(value)
    else:
        raise PointerError(f"cannot set {last!r} on {type(parent).__name__}")
    return result


# ---------------------------------------------------------------------------------------------
# tasks


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    json: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        return f"{self.method} {self.path}"


@dataclass(frozen=True)
class Reply:
    status: int  # 0 when no response arrived
    headers: Mapping[str, str]
    body: Any  # parsed JSON when it parses, else text

    def short(self) -> str:
        return str(self.status) if self.status else "no response"


@dataclass(frozen=True)
class Task:
    name: str
    kind: str
    call: Call
    done: Callable[[Reply], bool]


def _created(reply: Reply) -> bool:
    return reply.status == 201


def _ok(reply: Reply) -> bool:
    return reply.status == 200 and not _envelope_of(reply)


def _tool_ok(reply: Reply) -> bool:
    """An MCP ``tools/call`` whose result is not an error."""
    body = reply.body
    result = body.get("result") if isinstance(body, dict) else None
    return reply.status == 200 and isinstance(result, dict) and result.get("isError") is False


MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-06-18",
}


def _graphql_ok(reply: Reply) -> bool:
    body = reply.body
    return (
        reply.status == 200
        and isinstance(body, dict)
        and bool(body.get("data"))
        and not body.get("errors")
    )


def default_tasks(order_id: int = 17) -> list[Task]:
    """One task per kind of failure the demo API has."""
    return [
        Task(
            "create an order",
            "FastAPI 422",
            Call("POST", "/api/orders", {"sku": "WIDGET-1", "qty": -1}),
            _created,
        ),
        Task(
            "create an order (DRF)",
            "DRF 400",
            Call("POST", "/api/drf/orders", {"sku": "WIDGET-2", "quantity": 0}),
            _created,
        ),
        Task(
            "download an invoice", "Spring 500", Call("GET", f"/api/orders/{order_id}/invoice"), _ok
        ),
        Task(
            "track an order",
            "429 Retry-After",
            Call("GET", f"/api/orders/{order_id}/tracking"),
            _ok,
        ),
        Task("list the catalog", "nginx 503", Call("GET", "/api/catalog"), _ok),
        Task(
            "read the account",
            "401 expired token",
            Call(
                "GET",
                "/api/account",
                headers={"Authorization": "Bearer at_expired0000000000000000000000"},
            ),
            _ok,
        ),
        Task(
            "query an order total",
            "GraphQL errors in 200",
            Call("POST", "/graphql", {"query": f"{{ order(id: {order_id}) {{ id totl }} }}"}),
            _graphql_ok,
        ),
        Task(
            "file a support ticket",
            "MCP tool isError",
            Call(
                "POST",
                "/mcp",
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {
                        "name": "create_ticket",
                        "arguments": {"title": f"order {order_id} arrived damaged", "priority": 9},
                    },
                },
                headers=MCP_HEADERS,
            ),
            _tool_ok,
        ),
        Task(
            "fetch a monthly report",
            "slow upstream",
            Call("GET", f"/api/reports/monthly-{order_id}"),
            _ok,
        ),
        Task(
            "ship an order", "409 precondition", Call("POST", f"/api/orders/{order_id}/ship"), _ok
        ),
    ]


# ---------------------------------------------------------------------------------------------
# reading envelopes


def _envelope_of(reply: Reply) -> dict[str, Any] | None:
    """The envelope in a reply: REST ``error``, or where each protocol's answer carries it."""
    body = reply.body
    if not isinstance(body, dict):
        return None
    candidates = [body.get("error")]
    error = body.get("error")
    if isinstance(error, dict):  # JSON-RPC: {"error": {"code": -32602, "data": <envelope>}}
        candidates.append(error.get("data"))
    result = body.get("result")
    if isinstance(result, dict) and isinstance(result.get("_meta"), dict):  # MCP tool result
        candidates.append(result["_meta"].get("mend/error"))
    errors = body.get("errors")
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):  # GraphQL
        extensions = errors[0].get("extensions")
        candidates.append(extensions.get("mend") if isinstance(extensions, dict) else None)
    for found in candidates:
        if isinstance(found, dict) and isinstance(found.get("code"), str) and "action" in found:
            return found
    return None


def _arguments_base(call: Call) -> str:
    """Where the envelope's pointers start: an MCP tool's are in its arguments."""
    body = call.json
    if isinstance(body, dict) and body.get("method") == "tools/call":
        return "/params/arguments"
    return ""


_NOTHING = object()


def pick_allowed(allowed: Any) -> Any:
    """A value ``allowed_values`` permits, or ``_NOTHING`` when it does not name one."""
    if isinstance(allowed, list | tuple):
        return allowed[0] if allowed else _NOTHING
    if isinstance(allowed, dict):
        return _pick_from_constraints(allowed)
    return _NOTHING if allowed is None else allowed


def _pick_from_constraints(allowed: dict[str, Any]) -> Any:
    """The first option listed, else a bound that is itself allowed, else one past a strict one."""
    for key in ("enum", "one_of", "choices", "values", "examples"):
        options = allowed.get(key)
        if isinstance(options, list) and options:
            return options[0]
    for key in ("default", "minimum", "min", "ge", "gte", "maximum", "max", "le", "lte"):
        if isinstance(allowed.get(key), int | float | str) and not isinstance(
            allowed.get(key), bool
        ):
            return allowed[key]
    for key, step in (("exclusiveMinimum", 1), ("gt", 1), ("exclusiveMaximum", -1), ("lt", -1)):
        bound = allowed.get(key)
        if isinstance(bound, int) and not isinstance(bound, bool):
            return bound + step
    return _NOTHING


@dataclass(frozen=True)
class Fix:
    pointer: str
    value: Any
    received: Any = None


def plan_fixes(envelope: Mapping[str, Any]) -> list[Fix]:
    """What to write where, read only from the envelope."""
    top_field = envelope.get("field")
    suggested = envelope.get("suggested_value")
    invalid = [i for i in envelope.get("invalid_fields") or [] if isinstance(i, dict)]
    if not invalid and isinstance(top_field, str):
        invalid = [{"field": top_field}]
    fixes = []
    for item in invalid:
        pointer = item.get("field")
        if not isinstance(pointer, str):
            continue
        value = _NOTHING
        if pointer == top_field and suggested is not None:
            value = suggested
        if value is _NOTHING:
            value = pick_allowed(item.get("allowed_values"))
        if value is _NOTHING and len(invalid) == 1:
            value = (
                suggested if suggested is not None else pick_allowed(envelope.get("allowed_values"))
            )
        if value is not _NOTHING:
            fixes.append(Fix(pointer, value, item.get("received")))
    return fixes


def apply_fixes(document: Any, fixes: Sequence[Fix]) -> Any:
    """``document`` with every fix written; a string that merely contains the rejected token
    (a GraphQL query naming a wrong field) gets that token replaced rather than overwritten."""
    for fix in fixes:
        try:
            current = get_pointer(document, fix.pointer)
        except PointerError:
            current = _NOTHING
        value = fix.value
        if (
            isinstance(current, str)
            and isinstance(fix.received, str)
            and isinstance(value, str)
            and fix.received
            and fix.received != current
        ):
            word = re.compile(rf"(?<!\w){re.escape(fix.received)}(?!\w)")
            if word.search(current):
                # Backslashes are the only special characters of a replacement string.
                value = word.sub(str(value).replace("\\", "\\\\"), current)
        document = set_pointer(document, fix.pointer, value)
    return document


def parse_operation(operation: str, args: Mapping[str, Any] | None) -> Call | None:
    """``"POST /api/orders/{order_id}/confirm"`` + args -> a call; unused args become the body."""
    method, _, path = operation.strip().partition(" ")
    path = path.strip()
    if not method.isalpha() or not path.startswith("/"):
        return None
    remaining = dict(args or {})

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in remaining:
            return str(remaining.pop(name))
        return match.group(0)

    path = re.sub(r"\{\{?\s*(\w+)\s*\}?\}", fill, path)
    if method.upper() in {"GET", "DELETE", "HEAD"} or not remaining:
        return Call(method.upper(), path)
    return Call(method.upper(), path, remaining)


# ---------------------------------------------------------------------------------------------
# running


@dataclass
class TaskResult:
    name: str
    kind: str
    outcome: Outcome
    attempts: int
    trail: list[str]


@dataclass
class RunReport:
    mode: Mode
    base_url: str
    results: list[TaskResult]
    requests_sent: int

    @property
    def completed(self) -> int:
        return sum(r.outcome == "completed" for r in self.results)

    @property
    def completion_rate(self) -> float:
        return self.completed / len(self.results) if self.results else 0.0


@dataclass(frozen=True)
class _Stop:
    """Why the work on a task ends: its outcome, and the last line of its trail."""

    outcome: Outcome
    note: str


@dataclass
class AgentSettings:
    max_attempts: int = 4
    max_wait_s: float = 10.0
    request_timeout_s: float = 10.0
    task_timeout_s: float = 45.0
    token_path: str = "/auth/token"
    client_id: str = CLIENT_ID
    client_secret: str = CLIENT_SECRET


class Agent:
    """Works tasks against one base URL with one client identity."""

    def __init__(self, session: aiohttp.ClientSession, mode: Mode, settings: AgentSettings):
        self._session = session
        self._mode = mode
        self._settings = settings
        self.requests_sent = 0

    async def send(self, call: Call) -> Reply:
        self.requests_sent += 1
        timeout = aiohttp.ClientTimeout(total=self._settings.request_timeout_s)
        try:
            async with self._session.request(
                call.method,
                call.path,
                json=call.json,
                headers=dict(call.headers),
                timeout=timeout,
            ) as response:
                text = await response.text(errors="replace")
                body: Any = text
                if "json" in response.content_type:
                    try:
                        body = await response.json(content_type=None)
                    except ValueError:
                        body = text
                return Reply(response.status, dict(response.headers), body)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return Reply(0, {}, f"{type(exc).__name__}: {exc}")

    async def _token(self) -> str | None:
        reply = await self.send(
            Call(
                "POST",
                self._settings.token_path,
                {
                    "client_id": self._settings.client_id,
                    "client_secret": self._settings.client_secret,
                },
            )
        )
        body = reply.body
        if reply.status == 200 and isinstance(body, dict):
            token = body.get("access_token")
            return token if isinstance(token, str) else None
        return None

    async def run_task(self, task: Task) -> TaskResult:
        try:
            return await asyncio.wait_for(self._work(task), self._settings.task_timeout_s)
        except TimeoutError:
            return TaskResult(task.name, task.kind, "failed", 0, ["ran out of time"])

    async def _work(self, task: Task) -> TaskResult:
        call = task.call
        trail: list[str] = []
        blind_retry_used = False

        def result(outcome: Outcome, attempts: int, note: str) -> TaskResult:
            trail.append(note)
            return TaskResult(task.name, task.kind, outcome, attempts, trail)

        for attempt in range(1, self._settings.max_attempts + 1):
            reply = await self.send(call)
            if task.done(reply):
                return result("completed", attempt, f"{call.describe()} -> {reply.short()} done")
            envelope = _envelope_of(reply) if self._mode == "mend" else None
            if envelope is None:
                trail.append(f"{call.describe()} -> {reply.short()}")
                if blind_retry_used:
                    return result("failed", attempt, "same failure again, gave up")
                blind_retry_used = True
                trail.append("sent it again")
                continue
            code, action = envelope.get("code"), envelope.get("action")
            trail.append(f"{call.describe()} -> {reply.short()} {code} ({action})")
            step = await self._follow(action, envelope, call, trail)
            if isinstance(step, _Stop):
                return result(step.outcome, attempt, step.note)
            call = step
        return result("failed", self._settings.max_attempts, "out of attempts")

    async def _follow(
        self, action: Any, envelope: dict[str, Any], call: Call, trail: list[str]
    ) -> Call | _Stop:
        """The call to send next as the envelope's ``action`` says, or why the task stops."""
        if action in {"escalate", "report_bug"}:
            return _Stop("escalated", "stopped and told the human")
        steps = {
            "retry": self._wait,
            "fix_request": self._fix,
            "call_other_operation": self._call_first,
            "reauthenticate": self._reauthenticate,
        }
        step = steps.get(action) if isinstance(action, str) else None
        if step is None:
            return _Stop("failed", f"unknown action {action!r}")
        return await step(envelope, call, trail)

    async def _wait(self, envelope: dict[str, Any], call: Call, trail: list[str]) -> Call | _Stop:
        """``retry``: wait as long as asked (unless too long), then the same call."""
        wait_ms = envelope.get("retry_after_ms")
        wait_s = (wait_ms if isinstance(wait_ms, int | float) else 1000) / 1000
        if wait_s > self._settings.max_wait_s:
            return _Stop("failed", f"asked to wait {wait_s:g}s, too long")
        trail.append(f"waited {wait_s:g}s")
        await asyncio.sleep(wait_s)
        return call

    async def _fix(self, envelope: dict[str, Any], call: Call, trail: list[str]) -> Call | _Stop:
        """``fix_request``: the call with the values the envelope offers set."""
        base = _arguments_base(call)
        fixes = [replace(f, pointer=base + f.pointer) for f in plan_fixes(envelope)]
        try:
            fixed = apply_fixes(call.json, fixes)
        except PointerError as exc:
            return _Stop("failed", f"cannot apply the fix: {exc}")
        if not fixes or fixed == call.json:
            return _Stop("failed", "envelope offers no value to send")
        trail.append("set " + ", ".join(f"{f.pointer}={f.value!r}" for f in fixes))
        return replace(call, json=fixed)

    async def _call_first(
        self, envelope: dict[str, Any], call: Call, trail: list[str]
    ) -> Call | _Stop:
        """``call_other_operation``: the operation it names first, then the same call again."""
        operation = envelope.get("next_operation")
        args = envelope.get("next_operation_args")
        first = (
            parse_operation(operation, args if isinstance(args, dict) else None)
            if isinstance(operation, str)
            else None
        )
        if first is None:
            return _Stop("failed", f"unusable next_operation {operation!r}")
        first_reply = await self.send(replace(first, headers=dict(call.headers)))
        trail.append(f"{first.describe()} -> {first_reply.short()}")
        if not 200 <= first_reply.status < 300:
            return _Stop("failed", "the prerequisite call failed")
        return call

    async def _reauthenticate(
        self, envelope: dict[str, Any], call: Call, trail: list[str]
    ) -> Call | _Stop:
        """``reauthenticate``: a new token, then the call with it."""
        token = await self._token()
        if token is None:
            return _Stop("failed", "could not get a new token")
        trail.append(f"POST {self._settings.token_path} -> new token")
        return replace(call, headers={**call.headers, "Authorization": f"Bearer {token}"})


async def run_agent(
    base_url: str,
    mode: Mode,
    *,
    client_id: str | None = None,
    tasks: Sequence[Task] | None = None,
    settings: AgentSettings | None = None,
) -> RunReport:
    """Work every task (concurrently) and report what got done."""
    settings = settings or AgentSettings()
    client = client_id or f"agent-{mode}-{secrets.token_hex(4)}"
    headers = {
        "Accept": "application/json",
        # The demo API keeps rate limits, tokens and orders per client; a fresh id per run keeps
        # runs from seeing each other's state. mend's session (its repeats) is the run, too.
        "X-Client-Id": client,
        "X-Agent-Session": client,
    }
    task_list = list(tasks) if tasks is not None else default_tasks()
    async with aiohttp.ClientSession(base_url=base_url, headers=headers) as session:
        agent = Agent(session, mode, settings)
        results = await asyncio.gather(*(agent.run_task(t) for t in task_list))
    return RunReport(mode, base_url, list(results), agent.requests_sent)


# ---------------------------------------------------------------------------------------------
# presenting


def _paint(text: str, code: str, color: bool) -> str:
    return f"\033[{code}m{text}\033[0m" if color else text


def format_report(
    report: RunReport, *, label: str | None = None, color: bool = False, verbose: bool = True
) -> str:
    if label is None:
        label = "agent following envelopes" if report.mode == "mend" else "agent retrying blindly"
    total = len(report.results)
    lines = [
        f"{label} ({report.base_url}): {report.completed}/{total} tasks completed "
        f"({report.completion_rate:.0%}), {report.requests_sent} requests"
    ]
    if verbose:
        width = max((len(r.name) for r in report.results), default=0)
        kind_width = max((len(r.kind) for r in report.results), default=0)
        colors = {"completed": "32", "escalated": "33", "failed": "31"}
        for r in report.results:
            outcome = _paint(f"{r.outcome.upper():<9}", colors[r.outcome], color)
            lines.append(
                f"  {outcome}  {r.name:<{width}}  {r.kind:<{kind_width}}  {'; '.join(r.trail)}"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m demo.agent",
        description="Work the demo task list against an API, raw or through mend.",
    )
    parser.add_argument("--base-url", required=True, help="mend's listen URL, or the raw API's")
    parser.add_argument(
        "--mode",
        choices=["mend", "raw"],
        default="mend",
        help="read envelopes (mend, default) or only retry blindly (raw)",
    )
    parser.add_argument("--loop", action="store_true", help="repeat until interrupted")
    parser.add_argument("--rounds", type=int, default=None, help="stop after this many rounds")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between rounds")
    parser.add_argument("--quiet", action="store_true", help="one summary line per round")
    args = parser.parse_args(argv)
    mode: Mode = args.mode
    rounds = args.rounds if args.rounds is not None else (None if args.loop else 1)
    color = sys.stdout.isatty()

    async def loop() -> None:
        done = 0
        while rounds is None or done < rounds:
            if done:
                await asyncio.sleep(args.interval)
            report = await run_agent(args.base_url, mode)
            print(format_report(report, color=color, verbose=not args.quiet), flush=True)
            done += 1

    try:
        asyncio.run(loop())
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
