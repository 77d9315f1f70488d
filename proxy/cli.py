"""The ``mend`` command (and ``python -m proxy``): run, check, test, explain."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

import orjson

try:  # optional: a faster event loop where it is installed (the `speed` extra)
    import uvloop
except ImportError:  # pragma: no cover - exercised only where uvloop is absent
    uvloop = None  # type: ignore[assignment]

from proxy import __version__, ruletest
from proxy import explain as explaining
from proxy.engine import Engine
from proxy.rulefile import RuleError, load_rules, rule_files
from proxy.ruleset import RuleSet
from proxy.server import serve
from proxy.settings import PACKAGED_RULES, Settings, load_settings
from proxy.workers import run_workers


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
                "routes": [
                    {
                        "name": "default",
                        "prefix": "/",
                        "upstream": args.upstream,
                        "success_rules": args.success_rules or [],
                        **({"read_timeout": args.read_timeout} if args.read_timeout else {}),
                        **(
                            {"connect_timeout": args.connect_timeout}
                            if args.connect_timeout
                            else {}
                        ),
                    }
                ],
                "rules": args.rules or [],
                **overrides,
            }
        )
    except ValueError as exc:
        raise SystemExit(f"mend run: {exc}") from None


def install_uvloop() -> None:
    if uvloop is not None:
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def _run(args: argparse.Namespace) -> int:
    try:
        settings = _settings_from_args(args)
        Engine.load(settings)  # refuse to start on the errors `mend check` reports
    except RuleError as exc:  # one line a problem, as the logs and `mend check` say it
        print("\n".join(f"mend: error: {problem}" for problem in exc.problems), file=sys.stderr)
        return 2
    if settings.workers > 1:
        run_workers(settings)
        return 0
    install_uvloop()
    asyncio.run(serve(settings))
    return 0


def _check(args: argparse.Namespace) -> int:
    paths = [Path(p) for p in args.paths] or [PACKAGED_RULES]
    try:
        if args.config:
            settings = load_settings(Path(args.config))
            engine = Engine.load(settings)
            print(f"ok: {args.config}: {engine.rule_count} rules, {len(settings.routes)} routes")
            if not args.paths:
                return _coverage(args, settings, engine) if args.coverage else 0
        files = list(rule_files(paths))
        rules = load_rules(paths)
    except RuleError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return 1
    print(f"ok: {len(rules)} rules in {len(files)} files")
    return _coverage(args, None, None) if args.coverage else 0


def _coverage(args: argparse.Namespace, settings: Settings | None, engine: Engine | None) -> int:
    """``check --coverage DIR``: which rules answer the recorded responses in DIR."""
    recorded, problems = ruletest.load_recorded(Path(args.coverage))
    if settings is not None and engine is not None:
        try:
            route = explaining.route_for(settings, args.route, "/")
        except ValueError as exc:
            print(f"mend check: {exc}", file=sys.stderr)
            return 1
        fixed: RuleSet | None = engine.routes[route.name]
    else:
        fixed = None
    engines = ruletest.Engines(tuple(Path(p) for p in args.paths), not args.no_default_packs)

    def ruleset_for(success_rules: tuple[str, ...]) -> RuleSet:
        if fixed is not None:  # a config's route says which rules run on 2xx
            return fixed
        return engines.get((), success_rules).routes["default"]

    try:
        result = ruletest.coverage(recorded, ruleset_for)
    except RuleError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return 1
    print("\n".join([*problems, *result.lines()]))
    return 1 if problems else 0


def _test(args: argparse.Namespace) -> int:
    paths = [Path(p) for p in args.paths] or [ruletest.DEFAULT_TESTS]
    report = ruletest.run_tests(
        paths,
        [Path(p) for p in args.rules or ()],
        default_packs=not args.no_default_packs,
    )
    print("\n".join(report.lines()))
    return 0 if report.ok else 1


def _explain(args: argparse.Namespace) -> int:
    try:
        if args.body_file:
            body_file: Path | None = Path(args.body_file)
            body = Path(args.body_file).read_bytes()
        else:
            body_file, body = None, (args.body or "").encode()
        exchange = explaining.exchange_from(
            status=args.status,
            body=body,
            headers=args.header or (),
            method=args.method,
            path=args.path,
            request_headers=args.request_header or (),
            body_file=body_file,
        )
        rules = [Path(p) for p in args.rules or ()]
        if args.config:
            settings = load_settings(Path(args.config))
            settings = settings.model_copy(update={"rules": (*rules, *settings.rules)})
        else:
            settings = ruletest.engine_settings(
                rules,
                default_packs=not args.no_default_packs,
                success_rules=args.success_rules or (),
            )
        route = explaining.route_for(settings, args.route, args.path)
        engine = Engine.load(settings)
    except RuleError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"mend explain: {exc}", file=sys.stderr)
        return 2
    result = explaining.explain(engine, route.name, exchange, explaining.build_options(settings))
    if args.json:
        print(orjson.dumps(explaining.as_json(result, show_all=args.all)).decode())
    else:
        print(explaining.as_text(result, show_all=args.all))
    return 0


def _status(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an HTTP status") from None
    if not 100 <= value <= 599:
        raise argparse.ArgumentTypeError(f"{value} is not between 100 and 599")
    return value


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
    run.add_argument(
        "--success-rules",
        action="append",
        metavar="GLOB",
        help="ids of 2xx-matching rules to run, e.g. 'graphql.*' (repeatable; with --upstream)",
    )
    run.add_argument("--read-timeout", type=float, help="seconds (with --upstream; default 30)")
    run.add_argument("--connect-timeout", type=float, help="seconds (with --upstream; default 5)")
    run.add_argument(
        "--workers", type=int, help="processes sharing the agent port (SO_REUSEPORT); default 1"
    )
    run.add_argument("--no-default-packs", action="store_true", help="do not load rules/ packs")
    run.set_defaults(handler=_run)

    check = sub.add_parser("check", help="validate rule files")
    check.add_argument("paths", nargs="*", help="rule files or directories (default: rules/)")
    check.add_argument("--config", help="validate a config file and every rule it names")
    check.add_argument(
        "--coverage",
        metavar="DIR",
        help="report which rules answer the recorded responses in DIR: NAME.yaml "
        "({response: {status, headers, json|body}, request: {...}}) or raw bodies named "
        "STATUS-NAME.EXT (503-nginx.html; FILE.meta.yaml may give status, headers, request)",
    )
    check.add_argument("--route", help="with --config: the route whose rules to use")
    check.add_argument(
        "--no-default-packs", action="store_true", help="with --coverage: only PATHS' rules"
    )
    check.set_defaults(handler=_check)

    test = sub.add_parser("test", help="run rule test cases")
    test.add_argument("paths", nargs="*", help="case files or directories (default: rules/tests/)")
    test.add_argument("--rules", action="append", help="extra rule file for every case")
    test.add_argument("--no-default-packs", action="store_true", help="do not load rules/ packs")
    test.set_defaults(handler=_test)

    exp = sub.add_parser("explain", help="show which rule a response matches, and why")
    exp.add_argument("--status", type=_status, required=True, help="the upstream's status")
    exp.add_argument("--header", action="append", help="response header 'Name: value'")
    body = exp.add_mutually_exclusive_group()
    body.add_argument("--body-file", help="response body (Content-Type from .json/.html/.txt/.xml)")
    body.add_argument("--body", help="response body text")
    exp.add_argument("--method", default="GET", help="request method (default GET)")
    exp.add_argument("--path", default="/", help="request path (default /)")
    exp.add_argument("--request-header", action="append", help="request header 'Name: value'")
    exp.add_argument("--rules", action="append", help="rule file or directory (repeatable)")
    exp.add_argument("--config", help="use this config's rules and routes")
    exp.add_argument("--route", help="route name (default: the route whose prefix fits --path)")
    exp.add_argument(
        "--success-rules", action="append", help="glob of rules allowed on 2xx (no --config)"
    )
    exp.add_argument("--no-default-packs", action="store_true", help="do not load rules/ packs")
    exp.add_argument("--all", action="store_true", help="also list rules for other statuses")
    exp.add_argument("--json", action="store_true", help="print a machine-readable report")
    exp.set_defaults(handler=_explain)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return int(args.handler(args))
