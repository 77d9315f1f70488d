"""Serving: the listeners, signals and the rule watcher of one mend process.

One process serves both ports. Under ``--workers N`` (``proxy/runtime/workers.py``) each worker
serves
only the agent port, sharing it through SO_REUSEPORT, and the supervisor serves the admin port.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import os
import signal
import ssl
import sys
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

try:  # the event loop mend runs on: a dependency except on Windows, which uvloop does not support
    import uvloop
except ImportError:  # pragma: no cover - exercised only where uvloop is absent (Windows)
    uvloop = None  # type: ignore[assignment]

from prometheus_client import CollectorRegistry
from structlog.typing import FilteringBoundLogger

from proxy import __version__
from proxy.config import trace_config
from proxy.config.settings import Settings, parse_hostport
from proxy.config.shown import shown_upstreams
from proxy.config.sources import ConfigSource
from proxy.config.yamlfile import RuleError
from proxy.edge.limits import FdWatch, connection_budget, raise_nofile
from proxy.edge.server import Listener
from proxy.edge.tls import ListenerCertificate, reload_counter
from proxy.observation import tracing
from proxy.observation.logs import LineWriter, make_logger
from proxy.observation.metrics import MULTIPROC_ENV
from proxy.observation.stdlib_logs import route_stdlib_logging
from proxy.policy.crosscall.store import StateStore
from proxy.policy.rules.ruleengine import Engine, RuleStore
from proxy.runtime.admin import create_admin_app
from proxy.runtime.app import create_app
from proxy.runtime.books import Books, books_file
from proxy.runtime.health import HealthChecks, health_checks
from proxy.runtime.shared_books import SharedBooks, replica_name
from proxy.runtime.watch import RuleWatcher, reload_rules

#: Request log lines reach stdout at most this late (warnings and errors at once): see LineWriter.
LOG_FLUSH_INTERVAL = 0.2


def install_uvloop() -> None:
    """uvloop's event loop (a dependency except on Windows, which it does not support), else
    asyncio's own."""
    if uvloop is not None:
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


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
    _trim_c_heap()


def _trim_c_heap() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere
    nothing): reading and compiling the rules leaves about 3 MB of freed temporaries behind,
    resident in every sidecar for nothing (issue 43)."""
    with contextlib.suppress(OSError):
        trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
        if trim is not None:
            trim(0)


def settle_after_reloads(loop: asyncio.AbstractEventLoop) -> Callable[[bool, int], None]:
    """A reload listener that settles the heap on the event loop's thread, whichever thread
    reloaded: a collection there runs asyncio's and aiohttp's finalizers where they belong."""

    def listener(ok: bool, _: int) -> None:
        if ok:
            loop.call_soon_threadsafe(settle_heap)

    return listener


class EarlyHangups:
    """Notes a ``SIGHUP`` that arrives while mend starts (reading and compiling the rules takes
    seconds), whose default action would end the process; ``serve`` reloads once for it when
    its reloader is in place. Install it first thing, before the settings are read."""

    def __init__(self) -> None:
        self.seen = False
        signal.signal(signal.SIGHUP, self._note)

    def _note(self, _signum: int, _frame: object) -> None:
        self.seen = True


class SighupReloader:
    """``SIGHUP``: reload in a thread, like the watcher and the admin port, one at a time.

    On the loop, loading the rules held every request for the whole load (~0.4 s with the
    shipped packs). Signals that arrive during a reload make exactly one more afterwards, so a
    burst cannot queue reloads on the executor aiohttp's DNS lookups share.
    """

    def __init__(self, store: RuleStore, logger: FilteringBoundLogger) -> None:
        self.store = store
        self.log = logger
        self.running: asyncio.Future[Engine | RuleError] | None = None
        self._again = False

    def __call__(self) -> None:
        if self.running is not None:
            self._again = True
            return
        running = asyncio.ensure_future(
            asyncio.to_thread(reload_rules, self.store, self.log, "SIGHUP")
        )
        running.add_done_callback(self._done)
        self.running = running

    def _done(self, task: asyncio.Future[Engine | RuleError]) -> None:
        self.running = None
        if not task.cancelled() and (exc := task.exception()) is not None:
            # reload_rules logs rule errors itself; anything else is a bug, said once, here
            self.log.error("rules_reload_failed", trigger="SIGHUP", error=repr(exc))
        if self._again:
            self._again = False
            self()


async def wait_for_stop() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


async def serve(
    settings: Settings,
    *,
    worker: bool = False,
    source: ConfigSource | None = None,
    hangups: EarlyHangups | None = None,
    engine: Engine | None = None,
) -> None:
    """Run until SIGINT/SIGTERM. A worker shares the agent port and leaves admin to its parent.
    With a ``source`` (``--config``), every reload reads the config file again. ``engine``: the
    settings' rules, when the caller has already loaded them (``mend run`` does, to refuse to
    start on a bad one), so start-up does not read and compile them twice."""
    out = LineWriter(sys.stdout, flush_interval=LOG_FLUSH_INTERVAL)
    logger = make_logger(out, settings.log_level)
    # aiohttp's and asyncio's own records, as JSON lines, repeats counted once per interval
    stdlib = route_stdlib_logging(logger)
    try:
        await _serve(settings, logger, worker=worker, source=source, hangups=hangups, engine=engine)
    finally:
        stdlib.flush()
        out.flush()


def _within_file_limit(
    settings: Settings, nofile: int, logger: FilteringBoundLogger | None = None
) -> Settings:
    """Settings whose connection cap fits the process's file limit (said once, at start)."""
    budget = connection_budget(settings.max_connections, nofile)
    if budget >= settings.max_connections:
        return settings
    if logger is not None:
        logger.warning(
            "max_connections_lowered",
            configured=settings.max_connections,
            max_connections=budget,
            file_limit=nofile,
        )
    return settings.model_copy(update={"max_connections": budget})


def _reader(source: ConfigSource | None, nofile: int) -> Callable[[], Settings] | None:
    """How a reload reads the settings again: the config file, fitted to the file limit as the
    settings at start were (so an unchanged cap is not a change)."""
    if source is None:
        return None
    return lambda: _within_file_limit(source.load(), nofile)


#: The admin listener: its runner, its HOST:PORT, and the certificate it serves (None: plain).
_Site = tuple[web.BaseRunner, str, ListenerCertificate | None]
#: The agent listener, its HOST:PORT and certificate.
_Agent = tuple[Listener, str, ListenerCertificate | None]


def _tls(cert: ListenerCertificate | None, store: RuleStore) -> ssl.SSLContext | None:
    """A listener's TLS context, following the files the settings name; ``None``: plain."""
    if cert is None:
        return None
    store.on_reload.append(cert.follow(store))
    return cert.context


async def _open(agent: _Agent, sites: list[_Site], store: RuleStore, *, worker: bool) -> None:
    """Each listener bound and serving: the agent port (shared by workers), then admin."""
    listener, address, certificate = agent
    host, port = parse_hostport(address)
    await listener.listen(host, port, ssl_context=_tls(certificate, store), reuse_port=worker)
    for runner, address, cert in sites:
        await runner.setup()
        host, port = parse_hostport(address)
        await web.TCPSite(runner, host, port, backlog=1024, ssl_context=_tls(cert, store)).start()


def _books(*, worker: bool) -> Books:
    """The operator's books; a worker's are written where its supervisor reads them."""
    directory = os.environ.get(MULTIPROC_ENV) if worker else None
    return Books(file=books_file(Path(directory)) if directory else None)


def _shared(
    settings: Settings, books: Books, state: StateStore, logger: FilteringBoundLogger
) -> SharedBooks | None:
    """With a shared state store, this replica's books go to it and the others' come back."""
    if not settings.state.is_redis:
        return None
    shared = SharedBooks(state, books, logger, replica_name())
    books.replica = shared.replica
    books.remote = lambda: shared.others
    return shared


async def _serve(
    settings: Settings,
    logger: FilteringBoundLogger,
    *,
    worker: bool,
    source: ConfigSource | None = None,
    hangups: EarlyHangups | None = None,
    engine: Engine | None = None,
) -> None:
    loop = asyncio.get_running_loop()
    nofile = raise_nofile()
    settings = _within_file_limit(settings, nofile, logger)
    registry = CollectorRegistry()
    # this process's own tracer (a worker's made here, after it was spawned); mend run checked
    # the configuration before starting
    traced = trace_config.resolve(settings.tracing, os.environ)
    if traced is not None:
        logger.info("tracing", source=traced.source, sampler=traced.sampler)
    server = create_app(
        settings,
        registry,
        logger=logger,
        engine=engine,
        source=_reader(source, nofile),
        tracer=tracing.start(traced),
        books=_books(worker=worker),
    )
    store = server.proxy.store
    store.on_reload.append(settle_after_reloads(loop))
    shared = _shared(settings, server.proxy.books, server.proxy.crosscall.store, logger)
    grace = settings.shutdown_timeout
    # the admin port's readiness: a worker has none (its supervisor checks)
    health = None if worker else health_checks(settings, logger)
    if health is not None:
        store.on_reload.append(health.on_reload(store, loop))
    # certificates reload with the rules: SIGHUP, POST /-/reload and the watcher reach them all
    tls_reloads = reload_counter(registry)
    certificate = ListenerCertificate.for_listener(settings, "agent", logger, tls_reloads)
    agent: _Agent = (Listener(server, grace), settings.listen, certificate)
    sites: list[_Site] = []
    if not worker:
        token, books = settings.admin_token, server.proxy.books
        admin = create_admin_app(store, registry, logger, token=token, health=health, books=books)
        sites.append(
            (
                web.AppRunner(admin, access_log=None, shutdown_timeout=grace),
                settings.admin_listen,
                ListenerCertificate.for_listener(settings, "admin", logger, tls_reloads),
            )
        )
    settle_heap()
    await _open(agent, sites, store, worker=worker)
    logger.info(
        "started",
        version=__version__,
        listen=settings.listen,
        admin_listen=None if worker else settings.admin_listen,
        tls=[cert.listener for _, _, cert in (agent, *sites) if cert is not None] or None,
        worker=worker or None,
        rules=store.engine.rule_count,
        routes=[r.name for r in settings.routes],
        upstreams=shown_upstreams(settings),
    )
    # the catalog's first build took the loop, and every request, for ~0.3 s: a thread does it
    catalog_built = asyncio.ensure_future(asyncio.to_thread(server.catalog.entries))
    reloader = SighupReloader(store, logger)
    loop.add_signal_handler(signal.SIGHUP, reloader)
    if hangups is not None and hangups.seen:
        reloader()  # one came while mend started: the files may have changed since read
    config = source.path if source is not None else None
    watcher = RuleWatcher(store, logger, config=config) if settings.watch_rules else None
    if watcher is not None:
        watcher.start()
    # running beside the listeners: the fd watch, the health checks, the books' sharing
    beside: list[FdWatch | HealthChecks | SharedBooks] = [FdWatch(logger, nofile)]
    beside += [task for task in (health, shared) if task is not None]
    for task in beside:
        task.start()
    await wait_for_stop()
    logger.info("stopping", grace_s=grace)
    for task in beside:
        await task.stop()
    with contextlib.suppress(Exception):  # a failed build is the catalog page's to report
        await catalog_built
    if watcher is not None:
        await watcher.stop()
    for runner, _, _ in reversed(sites):
        await runner.cleanup()
    await agent[0].close()
