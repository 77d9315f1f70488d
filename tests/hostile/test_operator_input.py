"""Hostile operator input: YAML alias bombs and deeply nested JMESPath are ``file:line`` errors.

Before the bounds, the 9x9 "billion laughs" below (387 million strings from ~350 bytes) took
``mend check`` to 1.5 GB of RSS in 18 s, where a memory limit stopped it (the issue saw 3 GiB and
44 s), and ``(((...a...)))`` in a rule's ``json:`` query was a ``RecursionError`` traceback. Both
must now be refused in milliseconds, by every command and every reload trigger, with the line to
edit, and a rejected reload must leave the rules in force and be counted.
"""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry
from structlog.typing import FilteringBoundLogger

from proxy.config.route import Route
from proxy.config.settings import Settings
from proxy.config.sources import load_settings
from proxy.config.yamlfile import RuleError
from proxy.observation.logs import make_logger
from proxy.policy.rules.query import compile_query
from proxy.policy.rules.ruleengine import RuleStore
from proxy.policy.rules.rulefile import load_rules
from proxy.runtime.admin import create_admin_app
from proxy.runtime.app import create_app
from proxy.runtime.server import SighupReloader
from proxy.runtime.watch import RuleWatcher
from tests.conftest import MendTestServer, StartUpstream

ROOT = Path(__file__).resolve().parents[2]
#: A subprocess that regresses to expanding the bomb dies of MemoryError here, not at 3 GiB.
MEMORY_CAP_KIB = 1 << 20
FAILURES = ("mend_rule_reloads_total", {"result": "failure"})


def billion_laughs(preamble: str = "") -> str:
    """Nine anchors of nine aliases each: 9**9 strings once expanded."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
    return preamble + "\n".join(lines) + "\n"


def line_of(text: str, start: str) -> int:
    """The 1-based line of ``text`` that starts with ``start``."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith(start))


#: ``f``'s first ``*e`` is the alias that takes the expanded count past the bound.
BOMB = billion_laughs()
BOMB_LINE = line_of(BOMB, "f: ")
CONFIG_BOMB = billion_laughs("listen: 127.0.0.1:8080\n")
CONFIG_BOMB_LINE = line_of(CONFIG_BOMB, "f: ")
DEEP_QUERY = "(" * 5000 + "a" + ")" * 5000


def rule_text(code: str, query: str = "error") -> str:
    return (
        "rules:\n  - id: t.teapot\n    when:\n      status: 418\n"
        f"      json: [{{query: '{query}'}}]\n"
        f"    envelope: {{code: {code}, category: validation}}\n"
    )


#: (file text, line the problem names, words the problem says)
HOSTILE_RULES = {
    "billion laughs": (BOMB, BOMB_LINE, "past 100000 nodes"),
    "deep JMESPath": (rule_text("TEAPOT_V2", DEEP_QUERY), 5, "nests deeper than 100 levels"),
}


def mend(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m proxy ARGS`` under a 1 GiB address-space cap, so a regression fails fast."""
    capped = f'ulimit -v {MEMORY_CAP_KIB} && exec "$0" -m proxy "$@"'
    return subprocess.run(
        ["sh", "-c", capped, sys.executable, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# --- loading ------------------------------------------------------------------------------------


def test_billion_laughs_rule_file_is_rejected_fast_at_the_alias_line(tmp_path: Path) -> None:
    """A rule-file alias bomb is a ``file:line`` error naming the alias, in well under a second."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB)
    start = time.perf_counter()
    with pytest.raises(RuleError) as caught:
        load_rules([bomb])
    assert time.perf_counter() - start < 2
    (problem,) = caught.value.problems
    assert problem.startswith(f"{bomb}:{BOMB_LINE}: YAML: alias *e ")
    assert "past 100000 nodes" in problem


def test_billion_laughs_config_is_rejected_fast_at_the_alias_line(tmp_path: Path) -> None:
    """A config alias bomb is a ``file:line`` error naming the alias, in well under a second."""
    config = tmp_path / "mend.yaml"
    config.write_text(CONFIG_BOMB)
    start = time.perf_counter()
    with pytest.raises(RuleError) as caught:
        load_settings(config)
    assert time.perf_counter() - start < 2
    assert caught.value.problems == (
        f"{config}:{CONFIG_BOMB_LINE}: YAML: alias *e takes the document past 100000 nodes "
        "(an alias counts as a copy)",
    )


def test_a_config_with_anchors_and_aliases_still_loads(tmp_path: Path) -> None:
    """Anchors keep configs DRY: aliases that do not multiply load as their copies."""
    config = tmp_path / "mend.yaml"
    config.write_text(
        "routes:\n"
        "  - name: orders\n    prefix: /orders\n"
        "    upstream: &api http://127.0.0.1:9\n"
        "    success_rules: &graphql ['graphql.*', 'jsonrpc.*']\n"
        "  - name: billing\n    prefix: /billing\n"
        "    upstream: *api\n    success_rules: *graphql\n"
    )
    settings = load_settings(config)
    assert [r.upstream for r in settings.routes] == ["http://127.0.0.1:9"] * 2
    assert [r.success_rules for r in settings.routes] == [("graphql.*", "jsonrpc.*")] * 2


def test_a_rule_file_with_anchors_and_aliases_still_loads(tmp_path: Path) -> None:
    """A rule file may share conditions between rules through an anchor: here a POST-only rule,
    then the same conditions for every other method (the very same conditions twice could never
    match the second time, a ``file:line`` error of its own)."""
    rules = tmp_path / "shared.yaml"
    rules.write_text(
        "rules:\n"
        "  - id: t.one\n"
        "    when: {method: POST, all: [&teapot {status: 418, json: [{query: error}]}]}\n"
        "    envelope: {code: ONE, category: validation}\n"
        "  - id: t.two\n    when: *teapot\n"
        "    envelope: {code: TWO, category: validation}\n"
    )
    one, two = load_rules([rules])
    assert one.spec.when.all == [two.spec.when]


def test_an_alias_inside_its_own_anchor_is_rejected(tmp_path: Path) -> None:
    """``&a [*a]`` would expand forever: a ``file:line`` error, not a ``RecursionError``."""
    loop = tmp_path / "loop.yaml"
    loop.write_text("rules: &a\n  - *a\n")
    with pytest.raises(RuleError) as caught:
        load_rules([loop])
    assert caught.value.problems == (f"{loop}:2: YAML: alias *a refers to a node that contains it",)


def test_yaml_nested_past_the_bound_is_rejected(tmp_path: Path) -> None:
    """Thousands of nested ``[`` are a ``file:line`` error, not a ``RecursionError``."""
    deep = tmp_path / "deep.yaml"
    deep.write_text("rules:\n  - " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(RuleError) as caught:
        load_rules([deep])
    assert caught.value.problems == (f"{deep}:2: YAML: the document goes deeper than 100 levels",)


@pytest.mark.parametrize(
    "query",
    [
        DEEP_QUERY,
        "[" * 5000 + "a" + "]" * 5000,
        "!" * 5000 + "a",
        " || ".join(["a"] * 5000),
        " | ".join(["a"] * 5000),
        "a[*]." * 2000 + "a",
        "`" + "[" * 5000 + "]" * 5000 + "`",
    ],
    ids=["parens", "brackets", "nots", "or-chain", "pipe-chain", "projections", "literal"],
)
def test_a_deeply_nested_jmespath_query_is_a_rule_error_at_its_line(
    tmp_path: Path, query: str
) -> None:
    """Every way of nesting a query thousands deep is refused where the query is written."""
    rules = tmp_path / "deep.yaml"
    rules.write_text(rule_text("DEEP", query))
    with pytest.raises(RuleError) as caught:
        load_rules([rules])
    (problem,) = caught.value.problems
    assert problem.startswith(f"{rules}:5: rules.0.when.json.0.query: bad JMESPath query ")
    assert problem.endswith("the query nests deeper than 100 levels")
    assert len(problem) < 300  # the hostile query is not echoed whole


def test_a_deep_json_body_makes_a_query_answer_none_not_raise() -> None:
    """Comparing or printing upstream JSON too deep for the stack is no match, not a crash."""

    def deep() -> Any:
        value: Any = 1
        for _ in range(5000):
            value = [value]
        return value

    document = {"a": deep(), "b": [deep()]}  # equal, but not the same object: compared in full
    for query in ("a == b[0]", "to_string(a)", "contains(b, a)"):
        assert compile_query(query).search(document) is None


# --- the command line ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", HOSTILE_RULES)
def test_check_exits_1_with_file_and_line(tmp_path: Path, kind: str) -> None:
    """``mend check`` on a hostile rule file exits 1 with the ``file:line`` problem."""
    text, line, words = HOSTILE_RULES[kind]
    rules = tmp_path / "hostile.yaml"
    rules.write_text(text)
    result = mend("check", str(rules))
    assert result.returncode == 1
    assert result.stderr.startswith(f"{rules}:{line}: ")
    assert words in result.stderr
    assert "Traceback" not in result.stderr


def test_check_config_exits_1_with_file_and_line(tmp_path: Path) -> None:
    """``mend check --config`` on a config alias bomb exits 1 with the ``file:line`` problem."""
    config = tmp_path / "mend.yaml"
    config.write_text(CONFIG_BOMB)
    result = mend("check", "--config", str(config))
    assert result.returncode == 1
    assert result.stderr.startswith(f"{config}:{CONFIG_BOMB_LINE}: YAML: alias *e ")


@pytest.mark.parametrize("kind", HOSTILE_RULES)
def test_run_exits_2_with_one_error_line(tmp_path: Path, kind: str) -> None:
    """``mend run`` on a hostile rule file says one ``mend: error: file:line`` line and exits 2."""
    text, line, words = HOSTILE_RULES[kind]
    rules = tmp_path / "hostile.yaml"
    rules.write_text(text)
    result = mend("run", "--rules", str(rules), "--upstream", "http://127.0.0.1:9")
    assert result.returncode == 2
    (only,) = result.stderr.splitlines()
    assert only.startswith(f"mend: error: {rules}:{line}: ")
    assert words in only


def test_run_with_a_config_bomb_exits_2_with_one_error_line(tmp_path: Path) -> None:
    """``mend run --config BOMB`` says one ``mend: error: file:line`` line and exits 2."""
    config = tmp_path / "mend.yaml"
    config.write_text(CONFIG_BOMB)
    result = mend("run", "--config", str(config))
    assert result.returncode == 2
    (only,) = result.stderr.splitlines()
    assert only.startswith(f"mend: error: {config}:{CONFIG_BOMB_LINE}: YAML: alias *e ")


# --- a running mend ----------------------------------------------------------------------------


async def teapot(_: web.Request) -> web.Response:
    return web.json_response({"error": "short and stout"}, status=418)


@dataclass
class Live:
    """A real mend (agent and admin ports on loopback) answering ``TEAPOT_V1`` from ``rules``."""

    rules: Path
    registry: CollectorRegistry
    logger: FilteringBoundLogger
    store: RuleStore
    proxy_url: str
    admin_url: str

    def failures(self) -> float:
        name, labels = FAILURES
        return self.registry.get_sample_value(name, labels) or 0.0

    async def code(self) -> str:
        async with aiohttp.ClientSession() as session, session.get(self.proxy_url) as response:
            return response.headers["X-Error-Code"]


@pytest.fixture
async def live(
    start_upstream: StartUpstream,
    aiohttp_server: Callable[..., Awaitable[Any]],
    aiohttp_client: Callable[..., Awaitable[Any]],
    tmp_path: Path,
) -> Live:
    upstream = await start_upstream({"/{tail:.*}": teapot})
    rules = tmp_path / "teapot.yaml"
    rules.write_text(rule_text("TEAPOT_V1"))
    route = Route(name="default", upstream=str(upstream.make_url("/")).rstrip("/"))
    settings = Settings(routes=(route,), rules=(rules,), default_packs=False)
    registry, logger = CollectorRegistry(), make_logger(io.StringIO())
    server = create_app(settings, registry, logger=logger)
    proxy = (await aiohttp_client(MendTestServer(server))).server
    store = server.proxy.store
    admin = await aiohttp_server(create_admin_app(store, registry, logger))
    return Live(
        rules,
        registry,
        logger,
        store,
        str(proxy.make_url("/tea")),
        str(admin.make_url("/-/reload")),
    )


@pytest.mark.parametrize("kind", HOSTILE_RULES)
async def test_admin_reload_of_a_hostile_file_is_a_422_and_keeps_the_rules(
    live: Live, kind: str
) -> None:
    """``POST /-/reload`` answers 422 with the ``file:line`` reason; the old rules still answer."""
    text, line, words = HOSTILE_RULES[kind]
    live.rules.write_text(text)
    before = live.failures()
    start = time.perf_counter()
    async with aiohttp.ClientSession() as session, session.post(live.admin_url) as response:
        assert response.status == 422
        report = await response.json()
    assert time.perf_counter() - start < 2
    assert report["status"] == "rejected"
    (problem,) = report["problems"]
    assert problem.startswith(f"{live.rules}:{line}: ")
    assert words in problem
    assert live.failures() == before + 1
    assert await live.code() == "TEAPOT_V1"


async def counted(live: Live, before: float, seconds: float = 1.0) -> bool:
    """Whether a failed reload beyond ``before`` is counted within ``seconds``."""
    for _ in range(int(seconds / 0.01)):
        if live.failures() > before:
            return True
        await asyncio.sleep(0.01)
    return False


@pytest.mark.parametrize("kind", HOSTILE_RULES)
async def test_the_file_watcher_counts_a_hostile_file_as_a_failed_reload(
    live: Live, kind: str
) -> None:
    """The watcher's reload of a hostile file is counted as failed; the old rules keep answering."""
    text, _, _ = HOSTILE_RULES[kind]
    before = live.failures()
    watcher = RuleWatcher(live.store, live.logger, interval=0.02, debounce=0.05)
    watcher.start()
    try:
        # a change made before the watcher's first look would go unseen: edit until one is seen
        for attempt in range(10):
            live.rules.write_text(f"{text}# edit {attempt}\n")
            if await counted(live, before, seconds=0.5):
                break
        else:
            raise AssertionError("the watcher counted no failed reload")
    finally:
        await watcher.stop()
    assert await live.code() == "TEAPOT_V1"


@pytest.mark.parametrize("kind", HOSTILE_RULES)
async def test_sighup_counts_a_hostile_file_as_a_failed_reload(live: Live, kind: str) -> None:
    """``SIGHUP``'s reload of a hostile file is counted as failed; the old rules keep answering."""
    text, _, _ = HOSTILE_RULES[kind]
    live.rules.write_text(text)
    before = live.failures()
    reload = SighupReloader(live.store, live.logger)
    reload()  # what the SIGHUP handler runs
    assert await counted(live, before, seconds=5)
    assert await live.code() == "TEAPOT_V1"
