"""The admin listener: metrics, health, readiness and reload; never exposed to agents."""

from __future__ import annotations

import asyncio

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CollectorRegistry
from prometheus_client.aiohttp import make_aiohttp_handler
from structlog.typing import FilteringBoundLogger

from proxy.engine import RuleStore
from proxy.logs import make_logger
from proxy.rulefile import RuleError
from proxy.watch import reload_rules


async def healthz(_: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def admin_application(
    registry: CollectorRegistry, *, readyz: Handler, reload: Handler
) -> web.Application:
    """The admin port's routes.

    One process and the ``--workers`` supervisor differ only in what ready means and in how a
    reload reaches the rules.
    """
    app = web.Application()
    app.router.add_get("/metrics", make_aiohttp_handler(registry))
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_post("/-/reload", reload)
    return app


def create_admin_app(
    store: RuleStore,
    registry: CollectorRegistry,
    logger: FilteringBoundLogger | None = None,
) -> web.Application:
    log = logger or make_logger()

    async def readyz(_: web.Request) -> web.Response:
        rules = store.engine.rule_count
        return web.json_response({"status": "ready", "rules": rules})

    async def reload(_: web.Request) -> web.Response:
        """Reload every rule file now; 422 with ``file:line`` problems keeps the old rules."""
        engine = await asyncio.to_thread(reload_rules, store, log, "admin")
        if isinstance(engine, RuleError):
            problems = list(engine.problems)
            return web.Response(
                status=422,
                body=orjson.dumps(
                    {"status": "rejected", "problems": problems, "rules": store.engine.rule_count}
                ),
                content_type="application/json",
            )
        return web.json_response({"status": "reloaded", "rules": engine.rule_count})

    return admin_application(registry, readyz=readyz, reload=reload)
