"""The memory store stays flat under any number of agents: RSS measured in a fresh process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from proxy.policy.crosscall.memory import MemoryStore
from proxy.policy.crosscall.store import Failure

#: the stated bound: the default cap (100,000 entries) costs at most this much RSS
BOUND_KIB = 96 << 10
#: once the cap is reached, another 100,000 sessions may add at most this (allocator noise)
FLAT_KIB = 8 << 10

_PROBE = textwrap.dedent(
    """
    import asyncio, gc, json, time
    from proxy.policy.crosscall.memory import MemoryStore
    from proxy.policy.crosscall.store import Failure

    def rss_kib():
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])

    async def main():
        store = MemoryStore()  # the default cap
        now = int(time.time() * 1000)
        marks = [rss_kib()]
        for phase in range(3):  # 3 x 100,000 distinct sessions
            for i in range(100_000):
                await store.record(Failure(
                    f"{phase:02d}{i:022x}", f"{i:032x}", f"{i + 1:032x}", "auth", "GET",
                    "/api/orders/" + "9" * 40, "AUTH_REQUIRED", now, 600_000, None))
            gc.collect()
            marks.append(rss_kib())
        print(json.dumps({"rss": marks, "entries": store.entries}))

    asyncio.run(main())
    """
)


def test_100000_sessions_keep_rss_bounded_and_flat() -> None:
    """300,000 distinct failing sessions: RSS grows by at most 96 MiB for the first 100,000
    (the cap is reached), and at most 8 MiB more for the next 200,000."""
    run = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    result = json.loads(run.stdout)
    start, first, _, last = result["rss"]
    assert result["entries"] <= 100_000
    assert first - start < BOUND_KIB, result
    assert last - first < FLAT_KIB, result


async def test_the_cap_drops_least_recently_failing_sessions() -> None:
    """Past max_entries the oldest sessions go first; the newest keep their counts."""
    store = MemoryStore(max_entries=100)
    for i in range(200):
        await store.record(_failure(f"s{i}"))
    again = await store.record(_failure("s199"))
    forgotten = await store.record(_failure("s0"))
    assert store.entries <= 100
    assert again.count == 2
    assert forgotten.count == 1


async def test_failures_older_than_the_window_are_forgotten() -> None:
    """An identical failure after the window starts a new count."""
    store = MemoryStore()
    await store.record(_failure("s", now_ms=1_000_000))
    late = await store.record(_failure("s", now_ms=1_000_000 + 600_001))
    assert late.count == 1


def _failure(session: str, now_ms: int = 1_000_000) -> Failure:
    return Failure(session, "f" * 32, "r" * 32, "auth", "GET", "/x", "AUTH", now_ms, 600_000)
