"""Serving: the heap of compiled rules is kept out of the garbage collector's way, leak-free."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from proxy.server import settle_heap


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
