"""The admin listener: metrics, health, readiness and reload; never exposed to agents."""

from __future__ import annotations

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.aiohttp import make_aiohttp_handler

from proxy.engine import RuleStore
from proxy.rulefile import RuleError


def create_admin_app(store: RuleStore, registry: CollectorRegistry) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        rules = store.engine.rule_count
        return web.json_response({"status": "ready", "rules": rules})

    async def reload(_: web.Request) -> web.Response:
        try:
            engine = store.reload()
        except RuleError as exc:
            return web.Response(
                status=422,
                body=orjson.dumps({"status": "rejected", "problems": list(exc.problems)}),
                content_type="application/json",
            )
        return web.json_response({"status": "reloaded", "rules": engine.rule_count})

    app = web.Application()
    app.router.add_get("/metrics", make_aiohttp_handler(registry))
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_post("/-/reload", reload)
    return app
