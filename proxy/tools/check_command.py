"""``mend check``, ``mend test`` and ``mend config``: rule files, configs, documents, cases."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from proxy.config.certificates import check_files
from proxy.config.settings import PACKAGED_RULES, Settings
from proxy.config.sources import load_settings
from proxy.config.yamlfile import RuleError
from proxy.policy.ruleengine import Engine
from proxy.policy.rulefile import load_rules, rule_files
from proxy.policy.ruleset import RuleSet


def config_schema(args: argparse.Namespace) -> int:
    """``mend config --schema``: the config file's JSON Schema, for editors and CI."""
    if args.schema:
        print(orjson.dumps(Settings.model_json_schema(), option=orjson.OPT_INDENT_2).decode())
        return 0
    print("mend config: give --schema", file=sys.stderr)
    return 2


def check(args: argparse.Namespace) -> int:
    if args.openapi:
        return _check_openapi(Path(args.openapi))
    paths = [Path(p) for p in args.paths] or [PACKAGED_RULES]
    try:
        if args.config:
            settings = load_settings(Path(args.config))
            engine = Engine.load(settings)
            if tls_problems := check_files(settings):  # the certificates it would serve with
                print("\n".join(str(problem) for problem in tls_problems), file=sys.stderr)
                return 1
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


def _check_openapi(path: Path) -> int:
    """``check --openapi FILE``: the document validated (thoroughly: every schema and operation,
    which ``mend run`` leaves out), and the operations mend recognises."""
    from proxy.policy.openapi import report as openapi_report  # noqa: PLC0415 - a subcommand's own modules
    from proxy.policy.openapi.spec import Spec  # noqa: PLC0415

    try:
        spec = Spec.load(path, thorough=True)
    except RuleError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return 1
    print("\n".join(openapi_report.operation_lines(spec)))
    return 0


def _coverage(args: argparse.Namespace, settings: Settings | None, engine: Engine | None) -> int:
    """``check --coverage DIR``: which rules answer the recorded responses in DIR."""
    from proxy.policy import explanation as explaining  # noqa: PLC0415 - a subcommand's own modules
    from proxy.tools.ruletest.coverage import coverage, load_recorded  # noqa: PLC0415
    from proxy.tools.ruletest.engines import Engines  # noqa: PLC0415

    recorded, problems = load_recorded(Path(args.coverage))
    if settings is not None and engine is not None:
        try:
            route = explaining.route_for(settings, args.route, "/")
        except ValueError as exc:
            print(f"mend check: {exc}", file=sys.stderr)
            return 1
        fixed: RuleSet | None = engine.routes[route.name]
    else:
        fixed = None
    engines = Engines(tuple(Path(p) for p in args.paths), not args.no_default_packs)

    def ruleset_for(success_rules: tuple[str, ...]) -> RuleSet:
        if fixed is not None:  # a config's route says which rules run on 2xx
            return fixed
        return engines.get((), success_rules).routes["default"]

    try:
        result = coverage(recorded, ruleset_for)
    except RuleError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return 1
    print("\n".join([*problems, *result.lines()]))
    return 1 if problems else 0


def test(args: argparse.Namespace) -> int:
    from proxy.tools.ruletest.loading import DEFAULT_TESTS  # noqa: PLC0415 - a subcommand's own modules
    from proxy.tools.ruletest.runner import run_tests  # noqa: PLC0415

    paths = [Path(p) for p in args.paths] or [DEFAULT_TESTS]
    report = run_tests(
        paths,
        [Path(p) for p in args.rules or ()],
        default_packs=not args.no_default_packs,
    )
    print("\n".join(report.lines()))
    return 0 if report.ok else 1
