"""The admin listener: metrics, health, readiness, reload and the rules in force (``/rules``,
with each rule's ``file:line``); never exposed to agents."""

from __future__ import annotations

import asyncio
import hmac

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client import CollectorRegistry
from prometheus_client.aiohttp import make_aiohttp_handler
from structlog.typing import FilteringBoundLogger

from proxy.config.yamlfile import RuleError
from proxy.observation.logs import make_logger
from proxy.policy.rules.ruleengine import RuleStore
from proxy.runtime.admin_page import READ_ONLY_POSTS, add_cockpit_routes
from proxy.runtime.books import Books
from proxy.runtime.cockpit import MAX_PLAYGROUND_BODY, process_cockpit
from proxy.runtime.health import HealthChecks
from proxy.runtime.watch import reload_rules


async def healthz(_: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def bearer_guard(token: str, reads: frozenset[str] = frozenset()) -> Middleware:
    """A middleware that lets a mutating request (not GET or HEAD, nor a POST to one of
    ``reads``, which changes nothing) through only with ``Authorization: Bearer <token>``; reads
    (``/metrics``, health) stay open, as Prometheus and the kubelet expect, or are guarded by
    their own handlers. Compared in constant time."""
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method in ("GET", "HEAD") or request.path in reads:
            return await handler(request)
        given = request.headers.get("Authorization", "").encode("utf-8", "replace")
        if not hmac.compare_digest(given, expected):
            return web.json_response(
                {"status": "unauthorized", "detail": "send Authorization: Bearer <admin token>"},
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="mend admin"'},
            )
        return await handler(request)

    return guard


async def _named_mend(_: web.Request, response: web.StreamResponse) -> None:
    """``Server: mend`` on every admin answer, as on the agent port: no aiohttp banner."""
    response.headers["Server"] = "mend"


def admin_application(
    registry: CollectorRegistry,
    *,
    readyz: Handler,
    reload: Handler,
    token: str | None = None,
) -> web.Application:
    """The admin port's routes.

    One process and the ``--workers`` supervisor differ only in what ready means and in how a
    reload reaches the rules. With ``token`` (``admin_token``, ``MEND_ADMIN_TOKEN``), mutating
    endpoints need it as a bearer token.
    """
    guards = [bearer_guard(token, READ_ONLY_POSTS)] if token else []
    app = web.Application(middlewares=guards, client_max_size=2 * MAX_PLAYGROUND_BODY)
    app.on_response_prepare.append(_named_mend)
    app.router.add_get("/metrics", make_aiohttp_handler(registry))
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_post("/-/reload", reload)
    return app


def create_admin_app(
    store: RuleStore,
    registry: CollectorRegistry,
    logger: FilteringBoundLogger | None = None,
    token: str | None = None,
    health: HealthChecks | None = None,
    books: Books | None = None,
) -> web.Application:
    """One process's admin port: its readiness, its reloads, and the page over its books."""
    log = logger or make_logger()

    async def readyz(_: web.Request) -> web.Response:
        rules = store.engine.rule_count
        if health is not None and (unhealthy := health.unready()):
            return web.json_response(
                {"status": "unready", "rules": rules, "unhealthy": unhealthy}, status=503
            )
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

    app = admin_application(registry, readyz=readyz, reload=reload, token=token)
    cockpit = process_cockpit(store, registry, health, books or Books())
    add_cockpit_routes(app, cockpit, token)
    return app
