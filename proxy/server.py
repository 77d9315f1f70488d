"""Serving: the listeners, signals and the rule watcher of one mend process.

One process serves both ports. Under ``--workers N`` (``proxy/workers.py``) each worker serves
only the agent port, sharing it through SO_REUSEPORT, and the supervisor serves the admin port.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry
from structlog.typing import FilteringBoundLogger

from proxy import __version__
from proxy.admin import create_admin_app
from proxy.app import create_app
from proxy.logs import LineWriter, make_logger
from proxy.settings import Settings, parse_hostport
from proxy.watch import RuleWatcher, reload_rules

#: Request log lines reach stdout at most this late (warnings and errors at once): see LineWriter.
LOG_FLUSH_INTERVAL = 0.2


def settle_heap() -> None:
    """Collect, then hide every object alive now from the cyclic garbage collector.

    The compiled rules are hundreds of thousands of long-lived objects that each full collection
    walked again: about 30 ms with the event loop stopped, several times a minute under load,
    which was most of mend's p99. Frozen, they cost nothing (``gc.freeze``, as in CPython's
    docs for pre-fork servers). After a reload the heap is unfrozen first, so the rules it
    replaced can be collected.
    """
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def _settle_after_reload(ok: bool, _: int) -> None:
    if ok:
        settle_heap()


async def wait_for_stop() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


async def serve(settings: Settings, *, worker: bool = False) -> None:
    """Run until SIGINT/SIGTERM. A worker shares the agent port and leaves admin to its parent."""
    out = LineWriter(sys.stdout, flush_interval=LOG_FLUSH_INTERVAL)
    try:
        await _serve(settings, make_logger(out), worker=worker)
    finally:
        out.flush()


async def _serve(settings: Settings, logger: FilteringBoundLogger, *, worker: bool) -> None:
    registry = CollectorRegistry()
    server = create_app(settings, registry, logger=logger)
    store = server.proxy.store
    store.on_reload.append(_settle_after_reload)
    sites: list[tuple[web.BaseRunner, str]] = [(web.ServerRunner(server), settings.listen)]
    if not worker:
        admin = create_admin_app(store, registry, logger)
        sites.append((web.AppRunner(admin, access_log=None), settings.admin_listen))
    settle_heap()
    for runner, address in sites:
        await runner.setup()
        host, port = parse_hostport(address)
        await web.TCPSite(runner, host, port, backlog=1024, reuse_port=worker or None).start()
    logger.info(
        "started",
        version=__version__,
        listen=settings.listen,
        admin_listen=None if worker else settings.admin_listen,
        worker=worker or None,
        rules=store.engine.rule_count,
        routes=[r.name for r in settings.routes],
    )
    # off the loop, like the watcher's and the admin port's reloads: loading the rules took the
    # loop, and every request, for ~0.4 s; so does the catalog's first build, done here too
    background: set[asyncio.Future[Any]] = set()

    def in_thread(work: Callable[[], object]) -> None:
        task = asyncio.ensure_future(asyncio.to_thread(work))
        background.add(task)
        task.add_done_callback(background.discard)

    in_thread(server.catalog.entries)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(
        signal.SIGHUP, lambda: in_thread(lambda: reload_rules(store, logger, "SIGHUP"))
    )
    watcher = RuleWatcher(store, logger) if settings.watch_rules else None
    if watcher is not None:
        watcher.start()
    await wait_for_stop()
    logger.info("stopping")
    if watcher is not None:
        await watcher.stop()
    for runner, _ in reversed(sites):
        await runner.cleanup()
