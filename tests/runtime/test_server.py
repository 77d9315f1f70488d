"""Serving: the heap of compiled rules is kept out of the garbage collector's way, leak-free;
reloads on SIGHUP run off the event loop, one at a time."""

from __future__ import annotations

import asyncio
import gc
import io
import json
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any, cast

import pytest

import proxy.runtime.server
from proxy.observation.logs import make_logger
from proxy.policy.rules.ruleengine import RuleStore
from proxy.runtime.server import SighupReloader, settle_after_reloads, settle_heap


class Node:
    """An object that can sit in a reference cycle and be watched with a weakref."""

    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    yield
    gc.unfreeze()


def test_settling_collects_garbage_and_freezes_the_rest() -> None:
    """Cycles already dead are freed; what is alive is frozen out of later collections."""
    dead = cycle()
    alive = Node()
    settle_heap()
    assert dead() is None
    assert gc.get_freeze_count() > 0
    assert not any(obj is alive for obj in gc.get_objects())  # frozen: not tracked any more


def test_rules_replaced_by_a_reload_are_collected() -> None:
    """A cycle frozen at start-up and dropped later is freed by the next settle, not leaked."""
    keep = [Node()]
    keep[0].other = keep[0]  # a self-cycle, like compiled rules that refer to themselves
    watched = weakref.ref(keep[0])
    settle_heap()
    keep.clear()
    gc.collect()
    assert watched() is not None  # frozen: an ordinary collection cannot free it
    settle_heap()
    assert watched() is None


#: reload_rules is replaced in these tests: the store is never used
NO_STORE = cast(RuleStore, None)


async def _idle(reloader: SighupReloader) -> None:
    """Until no reload runs and none is due (a done reload starts the next before this wakes)."""
    while (running := reloader.running) is not None:
        await asyncio.wait([running])


async def test_a_burst_of_sighups_makes_one_more_reload_not_five(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Signals during a reload are folded into one reload after it, run in a thread."""
    threads: list[int] = []

    def slow_reload(*_: Any) -> None:
        threads.append(threading.get_ident())
        time.sleep(0.2)

    monkeypatch.setattr(proxy.runtime.server, "reload_rules", slow_reload)
    reloader = SighupReloader(NO_STORE, make_logger(io.StringIO()))
    for _ in range(5):
        reloader()
    await _idle(reloader)
    assert len(threads) == 2
    assert threading.get_ident() not in threads  # never on the event loop's thread


async def test_a_reload_that_crashes_is_logged(monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception other than a rule error is a log line, not an unretrieved task error."""

    def crash(*_: Any) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(proxy.runtime.server, "reload_rules", crash)
    out = io.StringIO()
    reloader = SighupReloader(NO_STORE, make_logger(out))
    reloader()
    await _idle(reloader)
    [line] = [json.loads(text) for text in out.getvalue().splitlines()]
    assert line["event"] == "rules_reload_failed"
    assert "disk gone" in line["error"]


async def test_the_heap_is_settled_on_the_loop_whichever_thread_reloaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reload in a thread asks the loop to collect: finalizers run where they belong."""
    settled_on: list[int] = []
    monkeypatch.setattr(
        proxy.runtime.server, "settle_heap", lambda: settled_on.append(threading.get_ident())
    )
    listener = settle_after_reloads(asyncio.get_running_loop())
    await asyncio.to_thread(listener, True, 10)
    await asyncio.to_thread(listener, False, 10)  # a rejected reload changed nothing
    await asyncio.sleep(0.05)
    assert settled_on == [threading.get_ident()]
