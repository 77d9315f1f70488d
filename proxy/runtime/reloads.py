"""The last reloads, for the admin page (issue 40): when, whether they loaded, and the problems
of one refused (the old rules stayed in force)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from proxy.policy.rules.ruleengine import RuleStore

#: reloads remembered
KEPT = 20


@dataclass(frozen=True, slots=True)
class Reload:
    at: float
    ok: bool
    rules: int
    #: a refused reload's problems, ``file:line`` first (empty: it loaded)
    problems: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class ReloadLog:
    """The newest ``KEPT`` reloads, newest first, from the load at start when ``rules`` says
    how many it loaded (the ``--workers`` supervisor loads none at start)."""

    def __init__(self, rules: int | None = None) -> None:
        first = [] if rules is None else [Reload(time.time(), True, rules)]
        self._kept: deque[Reload] = deque(first, maxlen=KEPT)

    def add(self, ok: bool, rules: int, problems: tuple[str, ...] = ()) -> None:
        self._kept.append(Reload(time.time(), ok, rules, problems))

    def entries(self) -> list[Reload]:
        return list(reversed(self._kept))

    def listener(self, store: RuleStore) -> Callable[[bool, int], None]:
        """A ``RuleStore.on_reload`` listener: each attempt, with the store's error if refused."""

        def heard(ok: bool, rules: int) -> None:
            error = store.last_error
            self.add(ok, rules, () if ok or error is None else tuple(error.splitlines()))

        return heard
