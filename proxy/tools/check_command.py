"""``mend check``, ``mend test`` and ``mend config``: rule files, configs, documents, cases."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson
import yaml

from proxy import __version__
from proxy.config.certificates import check_files
from proxy.config.settings import PACKAGED_RULES, Settings
from proxy.config.shown import shown_settings
from proxy.config.sources import load_settings
from proxy.config.yamlfile import RuleError
from proxy.policy.rules.ruleengine import FALLBACKS, Engine
from proxy.policy.rules.rulefile import rule_files
from proxy.policy.rules.ruleset import RuleSet
from proxy.policy.rules.words import counted
from proxy.tools.ruletest.engines import engine_settings


def config(args: argparse.Namespace) -> int:
    """``mend config --show``: the effective configuration (``nginx -T``); ``--schema``: the config
    file's JSON Schema, for editors and CI; neither: what the command does, and its flags."""
    if args.schema:
        print(orjson.dumps(Settings.model_json_schema(), option=orjson.OPT_INDENT_2).decode())
        return 0
    if args.show:
        return _show(args)
    print(args.usage(), end="")
    return 0


def _show(args: argparse.Namespace) -> int:
    """The settings ``mend run`` with the same flags would run with, as YAML, secrets masked."""
    from proxy.tools.run_command import StartupError, effective_settings  # noqa: PLC0415

    try:
        settings = effective_settings(args)
    except StartupError as exc:
        print("\n".join(f"mend: error: {problem}" for problem in exc.problems), file=sys.stderr)
        return 2
    print(f"# mend {__version__}: the effective configuration, defaults included, secrets masked")
    print(yaml.safe_dump(shown_settings(settings), sort_keys=False), end="")
    return 0


def _rules_line(engine: Engine, files: int) -> str:
    """``313 rules: 254 in 28 files, 59 built in``, every rule counted as ``mend run`` and
    ``/readyz`` count them: the files' and mend's built-in fallbacks and own errors."""
    total, built_in = engine.rule_count, len(engine.own) + len(_fallback_ids(engine))
    in_files = total - built_in
    return (
        f"{counted(total, 'rule')}: {in_files} in {counted(files, 'file')}, {built_in} built in "
        "(fallbacks and mend's own errors)"
    )


def _fallback_ids(engine: Engine) -> set[str]:
    """The ids of mend's built-in fallback rules among the engine's."""
    return {rule.id for rule in engine.rules if Path(rule.source.rpartition(":")[0]) == FALLBACKS}


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
            routes = counted(len(settings.routes), "route")
            print(f"ok: {args.config}: {counted(engine.rule_count, 'rule')}, {routes}")
            if not args.paths:
                return _coverage(args, settings, engine) if args.coverage else 0
        files = list(rule_files(paths))
        engine = Engine.load(engine_settings(paths, default_packs=False))
    except RuleError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return 1
    print(f"ok: {_rules_line(engine, len(files))}")
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
