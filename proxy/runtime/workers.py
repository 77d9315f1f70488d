"""``mend run --workers N``: N processes share the agent port; the parent supervises.

Each worker is a whole proxy on the agent port, opened with SO_REUSEPORT so the kernel spreads
connections across them. The parent serves the admin port: ``/metrics`` aggregates every worker's
metrics through prometheus-client's multiprocess mode, ``/-/reload`` validates the rules once and
then signals each worker to reload, and a worker that dies is started again.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import shutil
import signal
import tempfile
from multiprocessing.process import BaseProcess
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry, multiprocess
from structlog.typing import FilteringBoundLogger

from proxy.config.settings import Settings, parse_hostport
from proxy.config.sources import ConfigSource
from proxy.config.yamlfile import RuleError
from proxy.edge.tls import ListenerCertificate
from proxy.observation.logs import make_logger
from proxy.observation.metrics import MULTIPROC_ENV
from proxy.observation.stdlib_logs import route_stdlib_logging
from proxy.policy.rules.ruleengine import Loaded
from proxy.runtime.admin import admin_application
from proxy.runtime.admin_page import add_cockpit_routes
from proxy.runtime.cockpit import Cockpit, Sources, workers_books
from proxy.runtime.health import health_checks
from proxy.runtime.reloads import ReloadLog


def _worker_main(settings_json: str, source: ConfigSource | None) -> None:
    """Entry point of one worker process (spawned, so it imports everything afresh); with the
    ``--config`` source it reads again on every reload."""
    # in the child, after the env is set
    from proxy.runtime.server import EarlyHangups, install_uvloop, serve  # noqa: PLC0415

    hangups = EarlyHangups()

    install_uvloop()
    settings = Settings.model_validate_json(settings_json)
    if source is not None:  # a worker started again after a reload starts on the config as it is
        with contextlib.suppress(RuleError):
            settings = source.load()
    asyncio.run(serve(settings, worker=True, source=source, hangups=hangups))


class Supervisor:
    def __init__(
        self,
        settings: Settings,
        logger: FilteringBoundLogger,
        metrics_dir: str,
        source: ConfigSource | None = None,
    ) -> None:
        self.settings = settings
        self.source = source
        self._reread: asyncio.Future[None] | None = None
        self.log = logger
        self.metrics_dir = metrics_dir
        self.context = multiprocessing.get_context("spawn")
        self.workers: list[BaseProcess] = []
        self.stopping = False
        self.health = health_checks(settings, logger)
        #: the rules the workers load, loaded here when the admin page first asks
        self._loaded: Loaded | None = None
        self.reloads = ReloadLog()
        #: the admin port's certificate (the workers serve the agent port's)
        self.certificate = ListenerCertificate.for_listener(settings, "admin", logger)

    def start_worker(self) -> BaseProcess:
        process = self.context.Process(
            target=_worker_main, args=(self.settings.model_dump_json(), self.source), daemon=False
        )
        process.start()
        self.log.info("worker_started", pid=process.pid)
        return process

    def validate(self) -> Loaded:
        """What each worker's reload will load (the config read again, if there is one), for
        the admin port to answer with; ``RuleError`` with ``file:line`` problems."""
        settings = self.source.load() if self.source is not None else self.settings
        return Loaded.load(settings)

    def loaded(self) -> Loaded:
        """The rules the workers have, as the admin page shows them (``RuleError``)."""
        if self._loaded is None:
            self._loaded = self.validate()
        return self._loaded

    def reloaded(self, outcome: Loaded | RuleError) -> None:
        """A reload's outcome, for the page: the new rules, or the problems that kept the old."""
        if isinstance(outcome, RuleError):
            rules = self._loaded.engine.rule_count if self._loaded else 0
            self.reloads.add(False, rules, outcome.problems)
            return
        self._loaded = outcome
        self.reloads.add(True, outcome.engine.rule_count)

    def follow(self, settings: Settings) -> None:
        """The supervisor's own checks follow a reloaded config's routes (on the loop)."""
        checked = tuple(r for r in settings.routes if r.health_check is not None)
        if checked != tuple(self.health.routes):
            self.health.replace(checked)

    def sighup(self) -> None:
        """Every worker reloads; the supervisor's checks follow the config if it loads."""
        self.reload_all()
        if self.source is not None:
            self._reread = asyncio.ensure_future(self._follow_config())

    async def _follow_config(self) -> None:
        try:
            loaded = await asyncio.to_thread(self.validate)
        except RuleError as exc:
            self.reloaded(exc)
            return  # each worker logs and counts the same problems
        self.reloaded(loaded)
        self.follow(loaded.settings)

    def reload_all(self) -> None:
        """SIGHUP to every worker (rules, config, the agent port's certificate), and the admin
        port's certificate here."""
        self.signal_all(signal.SIGHUP)
        if self.certificate is not None:
            self.certificate.reload()

    def signal_all(self, sig: signal.Signals) -> None:
        for process in self.workers:
            if process.pid is not None and process.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, sig)

    async def keep_alive(self) -> None:
        """Replace workers that die, so one crash does not shrink the pool for good."""
        while not self.stopping:
            await asyncio.sleep(1)
            for index, process in enumerate(self.workers):
                if not process.is_alive() and not self.stopping:
                    self.log.error("worker_died", pid=process.pid, exitcode=process.exitcode)
                    if process.pid is not None:
                        multiprocess.mark_process_dead(process.pid, self.metrics_dir)  # type: ignore[no-untyped-call]
                    self.workers[index] = self.start_worker()

    async def stop(self) -> None:
        """SIGTERM to every worker at once; each drains within ``shutdown_timeout`` (plus a
        little for its own exit), all in parallel, before any is killed."""
        self.stopping = True
        self.signal_all(signal.SIGTERM)
        grace = self.settings.shutdown_timeout + 5
        await asyncio.gather(*(asyncio.to_thread(p.join, grace) for p in self.workers))
        for process in self.workers:
            if process.is_alive():
                self.log.error("worker_killed", pid=process.pid, grace_s=grace)
                process.kill()
                process.join()

    async def listening(self) -> bool:
        """Whether the agent port accepts a connection now (one worker at least listens)."""
        host, port = parse_hostport(self.settings.listen)
        try:
            async with asyncio.timeout(1):
                _, writer = await asyncio.open_connection(
                    "127.0.0.1" if host in ("0.0.0.0", "::", "") else host, port
                )
        except (OSError, TimeoutError):
            return False
        writer.close()
        return True

    def admin_app(self) -> web.Application:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=self.metrics_dir)  # type: ignore[no-untyped-call]

        async def readyz(_: web.Request) -> web.Response:
            alive = sum(p.is_alive() for p in self.workers)
            unhealthy = self.health.unready()
            # workers exist a few seconds before they listen: ready when the port answers
            ready = alive == len(self.workers) and not unhealthy and await self.listening()
            body: dict[str, object] = {"status": "ready" if ready else "degraded", "workers": alive}
            if unhealthy:
                body["unhealthy"] = unhealthy
            return web.json_response(body, status=200 if ready else 503)

        async def reload(_: web.Request) -> web.Response:
            try:
                loaded = await asyncio.to_thread(self.validate)
            except RuleError as exc:
                self.reloaded(exc)
                self.log.error(
                    "rules_reload_rejected", trigger="admin", problems=list(exc.problems)
                )
                # the workers try too, fail the same way and count it: the supervisor's own
                # metrics are not in the multiprocess store /metrics reads
                self.reload_all()
                return web.json_response(
                    {"status": "rejected", "problems": list(exc.problems)}, status=422
                )
            self.reload_all()
            self.reloaded(loaded)
            self.follow(loaded.settings)
            rules = loaded.engine.rule_count
            return web.json_response(
                {"status": "reloaded", "rules": rules, "workers": len(self.workers)}
            )

        token = self.settings.admin_token
        app = admin_application(registry, readyz=readyz, reload=reload, token=token)
        sources = Sources(
            settings=lambda: self.loaded().settings,
            engine=lambda: self.loaded().engine,
            registry=registry,
            health=lambda: self.health.state,
            books=workers_books(Path(self.metrics_dir)),
            reloads=self.reloads,
        )
        add_cockpit_routes(app, Cockpit(sources), token)
        return app

    async def run(self) -> None:
        self.workers = [self.start_worker() for _ in range(self.settings.workers)]
        runner = web.AppRunner(self.admin_app(), access_log=None)
        await runner.setup()
        host, port = parse_hostport(self.settings.admin_listen)
        tls = self.certificate.context if self.certificate is not None else None
        await web.TCPSite(runner, host, port, ssl_context=tls).start()
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, self.sighup)
        self.log.info(
            "supervisor_started",
            workers=self.settings.workers,
            listen=self.settings.listen,
            admin_listen=self.settings.admin_listen,
        )
        guard = asyncio.create_task(self.keep_alive())
        self.health.start()
        await stop.wait()
        self.log.info("stopping")
        await self.stop()
        guard.cancel()
        await self.health.stop()
        await runner.cleanup()


def run_workers(settings: Settings, source: ConfigSource | None = None) -> None:
    """Supervise ``settings.workers`` worker processes until SIGINT/SIGTERM."""
    metrics_dir = tempfile.mkdtemp(prefix="mend-metrics-")
    # set before any worker starts: prometheus-client picks its value store at import time
    os.environ[MULTIPROC_ENV] = metrics_dir
    try:
        logger = make_logger(level=settings.log_level)
        route_stdlib_logging(logger)
        asyncio.run(Supervisor(settings, logger, metrics_dir, source).run())
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)
