"""The ``mend`` command (and ``python -m proxy``): run, check, test, explain."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web

try:  # optional: a faster event loop where it is installed (the `speed` extra)
    import uvloop
except ImportError:  # pragma: no cover - exercised only where uvloop is absent
    uvloop = None  # type: ignore[assignment]
from prometheus_client import CollectorRegistry

from proxy import __version__
from proxy.admin import create_admin_app
from proxy.app import APP_KEY, create_app
from proxy.engine import Engine
from proxy.logs import make_logger
from proxy.rulefile import RuleError, load_rules, rule_files
from proxy.settings import PACKAGED_RULES, Settings, load_settings, parse_hostport


def _settings_from_args(args: argparse.Namespace) -> Settings:
    overrides: dict[str, object] = {}
    if args.listen:
        overrides["listen"] = args.listen
    if args.admin_listen:
        overrides["admin_listen"] = args.admin_listen
    if args.no_default_packs:
        overrides["default_packs"] = False
    if getattr(args, "workers", None):
        overrides["workers"] = args.workers
    if args.config:
        settings = load_settings(Path(args.config), overrides)
        if args.rules:
            settings = settings.model_copy(
                update={"rules": (*map(Path, args.rules), *settings.rules)}
            )
        return settings
    if not args.upstream:
        raise SystemExit("mend run: give --upstream URL or --config FILE")
    try:
        return Settings.model_validate(
            {
                "routes": [{"name": "default", "prefix": "/", "upstream": args.upstream}],
                "rules": args.rules or [],
                **overrides,
            }
        )
    except ValueError as exc:
        raise SystemExit(f"mend run: {exc}") from None


async def _serve(settings: Settings) -> None:
    registry = CollectorRegistry()
    logger = make_logger()
    app = create_app(settings, registry, logger=logger)
    store = app[APP_KEY].store
    admin = create_admin_app(store, registry)
    runners = [web.AppRunner(app, access_log=None), web.AppRunner(admin, access_log=None)]
    for runner in runners:
        await runner.setup()
    for runner, address in zip(runners, (settings.listen, settings.admin_listen), strict=True):
        host, port = parse_hostport(address)
        await web.TCPSite(runner, host, port, backlog=1024).start()
    logger.info(
        "started",
        version=__version__,
        listen=settings.listen,
        admin_listen=settings.admin_listen,
        rules=store.engine.rule_count,
        routes=[r.name for r in settings.routes],
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    def _reload() -> None:
        try:
            store.reload()
            logger.info("rules_reloaded", rules=store.engine.rule_count, trigger="SIGHUP")
        except RuleError as exc:
            logger.error("rules_reload_rejected", problems=list(exc.problems), trigger="SIGHUP")

    loop.add_signal_handler(signal.SIGHUP, _reload)
    await stop.wait()
    logger.info("stopping")
    for runner in reversed(runners):
        await runner.cleanup()


def _run(args: argparse.Namespace) -> int:
    try:
        settings = _settings_from_args(args)
        Engine.load(settings)  # refuse to start on the errors `mend check` reports
    except RuleError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        print("mend: not starting: fix the rule or config errors above", file=sys.stderr)
        return 2
    if uvloop is not None:
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    asyncio.run(_serve(settings))
    return 0


def _check(args: argparse.Namespace) -> int:
    paths = [Path(p) for p in args.paths] or [PACKAGED_RULES]
    try:
        if args.config:
            settings = load_settings(Path(args.config))
            engine = Engine.load(settings)
            print(f"ok: {args.config}: {engine.rule_count} rules, {len(settings.routes)} routes")
            if not args.paths:
                return 0
        files = list(rule_files(paths))
        rules = load_rules(paths)
    except RuleError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return 1
    print(f"ok: {len(rules)} rules in {len(files)} files")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mend", description="Turns legacy API errors into agent-readable envelopes."
    )
    parser.add_argument("--version", action="version", version=f"mend {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the proxy")
    run.add_argument("--upstream", help="URL of the API to put mend in front of")
    run.add_argument("--rules", action="append", help="rule file or directory (repeatable)")
    run.add_argument("--listen", help="HOST:PORT for agents (default 127.0.0.1:8080)")
    run.add_argument("--admin-listen", help="HOST:PORT for /metrics etc. (default 127.0.0.1:9464)")
    run.add_argument("--config", help="YAML config with routes to several upstreams")
    run.add_argument("--no-default-packs", action="store_true", help="do not load rules/ packs")
    run.set_defaults(handler=_run)

    check = sub.add_parser("check", help="validate rule files")
    check.add_argument("paths", nargs="*", help="rule files or directories (default: rules/)")
    check.add_argument("--config", help="validate a config file and every rule it names")
    check.set_defaults(handler=_check)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return int(args.handler(args))
