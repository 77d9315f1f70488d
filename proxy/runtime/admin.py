"""The admin listener: metrics, health, readiness, reload and the rules in force (``/rules``,
with each rule's ``file:line``); never exposed to agents."""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Iterable

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client import CollectorRegistry
from prometheus_client.aiohttp import make_aiohttp_handler
from structlog.typing import FilteringBoundLogger

from proxy.config.yamlfile import RuleError
from proxy.observation.logs import make_logger
from proxy.policy.ruleengine import RuleStore
from proxy.policy.ruleset import Rule
from proxy.runtime.health import HealthChecks
from proxy.runtime.watch import reload_rules


async def healthz(_: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def bearer_guard(token: str) -> Middleware:
    """A middleware that lets a mutating request (not GET or HEAD) through only with
    ``Authorization: Bearer <token>``; reads (``/metrics``, health) stay open, as Prometheus
    and the kubelet expect. Compared in constant time."""
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method in ("GET", "HEAD"):
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


def rules_listing(rules: Iterable[Rule]) -> list[dict[str, object]]:
    """Every rule in force, in order, with its ``file:line``: the operator's view of what the
    agent port's catalog lists by id only."""
    return [
        {
            "id": rule.id,
            "pack": rule.pack,
            "source": rule.source,
            "code": rule.envelope.spec.code,
            "category": rule.envelope.spec.category.value,
            "description": rule.description,
        }
        for rule in rules
    ]


async def _named_mend(_: web.Request, response: web.StreamResponse) -> None:
    """``Server: mend`` on every admin answer, as on the agent port: no aiohttp banner."""
    response.headers["Server"] = "mend"


def admin_application(
    registry: CollectorRegistry,
    *,
    readyz: Handler,
    reload: Handler,
    token: str | None = None,
    rules: Handler | None = None,
) -> web.Application:
    """The admin port's routes.

    One process and the ``--workers`` supervisor differ only in what ready means and in how a
    reload reaches the rules. With ``token`` (``admin_token``, ``MEND_ADMIN_TOKEN``), mutating
    endpoints need it as a bearer token.
    """
    app = web.Application(middlewares=[bearer_guard(token)] if token else [])
    app.on_response_prepare.append(_named_mend)
    app.router.add_get("/metrics", make_aiohttp_handler(registry))
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_post("/-/reload", reload)
    if rules is not None:
        app.router.add_get("/rules", rules)
    return app


def create_admin_app(
    store: RuleStore,
    registry: CollectorRegistry,
    logger: FilteringBoundLogger | None = None,
    token: str | None = None,
    health: HealthChecks | None = None,
) -> web.Application:
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

    async def rules(_: web.Request) -> web.Response:
        return web.json_response({"rules": rules_listing(store.engine.rules)})

    return admin_application(registry, readyz=readyz, reload=reload, token=token, rules=rules)
