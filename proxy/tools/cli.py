"""The ``mend`` command (and ``python -m proxy``): run, check, test, explain."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

import orjson
from multidict import CIMultiDict, MultiDict
from pydantic import ValidationError

from proxy import __version__
from proxy.config.certificates import TLSFileError, check_files
from proxy.config.choices import ProtocolName
from proxy.config.otel import TracingError
from proxy.config.route import Route
from proxy.config.settings import PACKAGED_RULES, Settings
from proxy.config.sources import ConfigSource, load_settings, single_upstream
from proxy.config.yamlfile import RuleError
from proxy.observation import tracing
from proxy.policy import json_depth
from proxy.policy.exchange import NOT_JSON
from proxy.policy.redaction.sets import build_set, load_shipped
from proxy.policy.ruleengine import Engine
from proxy.policy.rulefile import load_rules, rule_files
from proxy.policy.ruleset import RuleSet
from proxy.runtime.server import EarlyHangups, install_uvloop, serve
from proxy.runtime.workers import run_workers

if TYPE_CHECKING:  # what only `mend test`, `explain` and `check --openapi` use, imported by them
    from proxy.policy.openapi.spec import Spec
    from proxy.tools import explain as explaining


def _config_source(args: argparse.Namespace, overrides: dict[str, object]) -> ConfigSource:
    """``--config FILE`` with the flags that override its keys: read now, and on every reload."""
    rules = tuple(map(Path, args.rules or ()))
    return ConfigSource(Path(args.config), overrides, rules, getattr(args, "state", None))


def _settings_from_args(args: argparse.Namespace) -> tuple[Settings, ConfigSource | None]:
    """The settings ``mend run`` starts with, and the config they are read again from on reload
    (None for the single-upstream form: its settings are the flags)."""
    overrides: dict[str, object] = {}
    if args.listen:
        overrides["listen"] = args.listen
    if args.admin_listen:
        overrides["admin_listen"] = args.admin_listen
    if args.no_default_packs:
        overrides["default_packs"] = False
    if args.no_watch:
        overrides["watch_rules"] = False
    if getattr(args, "workers", None):
        overrides["workers"] = args.workers
    state = getattr(args, "state", None)
    if state and not args.config:
        overrides["state"] = state
    overrides.update(_listener_tls(args))
    upstream_tls = _upstream_tls(args)
    if args.config:
        _single_route_flags_unused(args)
        source = _config_source(args, overrides)
        return source.load(), source
    if not args.upstream:
        raise StartupError("give --upstream URL or --config FILE")
    try:
        route = {
            "upstream": args.upstream,
            "success_rules": args.success_rules or [],
            **({"protocol": args.protocol} if args.protocol else {}),
            **({"tls": upstream_tls} if upstream_tls else {}),
            **_openapi_flags(args),
            **({"read_timeout": args.read_timeout} if args.read_timeout else {}),
            **({"connect_timeout": args.connect_timeout} if args.connect_timeout else {}),
        }
        settings = single_upstream(route, args.rules or [], overrides)
    except ValidationError as exc:
        errors = exc.errors()
        # a route that fails leaves "routes" empty, and pydantic says so too: not the news
        specific = [e for e in errors if tuple(e["loc"]) != ("routes",)] or errors
        raise StartupError(*map(_flag_problem, specific)) from None
    return settings, None


#: ``mend run`` flags that describe the single route of ``--upstream``: a config has its own.
_SINGLE_ROUTE_FLAGS = {
    "upstream": "--upstream",
    "success_rules": "--success-rules",
    "protocol": "--protocol",
    "read_timeout": "--read-timeout",
    "connect_timeout": "--connect-timeout",
    "openapi": "--openapi",
    "validate_requests": "--validate-requests",
}


def _single_route_flags_unused(args: argparse.Namespace) -> None:
    """With ``--config``, a single-route flag would be silently ignored: refuse it instead."""
    given = [flag for key, flag in _SINGLE_ROUTE_FLAGS.items() if getattr(args, key, None)]
    if given:
        raise StartupError(
            f"{given[0]}: not with --config; set it on the config's route "
            "(--config FILE describes every route itself)"
        )


def _openapi_flags(args: argparse.Namespace) -> dict[str, object]:
    """``--openapi``, ``--validate-requests`` and ``--mcp-tools`` as the single route's settings."""
    out: dict[str, object] = {}
    if getattr(args, "openapi", None):
        out["openapi"] = args.openapi
    if getattr(args, "validate_requests", False):
        out["validate_requests"] = True
    if getattr(args, "mcp_tools", None):
        out["mcp_tools"] = args.mcp_tools
    return out


class StartupError(Exception):
    """A problem with ``mend run``'s flags or environment, said in one line each."""

    def __init__(self, *problems: str) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


#: The flag that sets each settings field in the single-upstream form.
_FLAGS = {
    "upstream": "--upstream",
    "listen": "--listen",
    "admin_listen": "--admin-listen",
    "read_timeout": "--read-timeout",
    "connect_timeout": "--connect-timeout",
    "workers": "--workers",
    "rules": "--rules",
    "openapi": "--openapi",
    "validate_requests": "--validate-requests",
    "mcp_tools": "--mcp-tools",
    "state": "--state",
}


#: ``mend run`` flags for TLS: the listeners' (with --upstream or --config), the upstream's.
_LISTENER_TLS_FLAGS = {
    "tls_cert": "--tls-cert",
    "tls_key": "--tls-key",
    "admin_tls_cert": "--admin-tls-cert",
    "admin_tls_key": "--admin-tls-key",
}
_UPSTREAM_TLS_FLAGS = {
    "ca_file": "--upstream-ca",
    "cert_file": "--upstream-cert",
    "key_file": "--upstream-key",
    "server_name": "--upstream-server-name",
}
_FLAGS.update(_LISTENER_TLS_FLAGS)
_FLAGS.update(_UPSTREAM_TLS_FLAGS)


def _given(args: argparse.Namespace, flags: dict[str, str]) -> dict[str, str]:
    """``{setting: value}`` for each of ``flags`` given on the command line."""
    values = {key: getattr(args, flag[2:].replace("-", "_"), None) for key, flag in flags.items()}
    return {key: value for key, value in values.items() if value}


def _listener_tls(args: argparse.Namespace) -> dict[str, str]:
    """The listeners' certificate flags given, as settings."""
    given = _given(args, _LISTENER_TLS_FLAGS)
    for key, cert in (("tls_key", "tls_cert"), ("admin_tls_key", "admin_tls_cert")):
        if key in given and cert not in given and not args.config:
            flag, needed = _LISTENER_TLS_FLAGS[key], _LISTENER_TLS_FLAGS[cert]
            raise StartupError(f"{flag}: needs {needed} (the certificate it is the key of)")
    return given


def _upstream_tls(args: argparse.Namespace) -> dict[str, str]:
    """The ``--upstream-*`` TLS flags given, as the single route's ``tls:`` block."""
    given = _given(args, _UPSTREAM_TLS_FLAGS)
    if given and args.config:
        flag = _UPSTREAM_TLS_FLAGS[next(iter(given))]
        raise StartupError(f"{flag}: applies to --upstream; give the config's route a tls: block")
    if "key_file" in given and "cert_file" not in given:
        raise StartupError("--upstream-key: needs --upstream-cert (the client certificate)")
    return given


def _tls_problem(exc: TLSFileError, args: argparse.Namespace) -> str:
    """``--tls-cert FILE: reason`` for a file given by a flag, else the config's key for it."""
    setting = exc.setting
    if setting in _LISTENER_TLS_FLAGS and getattr(args, setting, None):
        setting = _LISTENER_TLS_FLAGS[setting]
    elif not args.config and setting.startswith("routes[default].tls."):
        setting = _UPSTREAM_TLS_FLAGS[setting.rpartition(".")[2]]
    elif args.config:
        setting = f"{args.config}: {setting}"
    return f"{setting} {exc.path}: {exc.reason}"


def _flag_problem(error: Any) -> str:
    """``--upstream: upstream 'localhost:1' must be an http:// or https:// URL with a host``."""
    name = next((str(p) for p in reversed(error["loc"]) if str(p) in _FLAGS), None)
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{_FLAGS[name]}: {message}" if name else message


def _listen_problem(exc: OSError) -> str:
    """A failed bind, in asyncio's words, which name the address and the reason."""
    return f"cannot listen: {exc.strerror or exc}"


def _errors(problems: Sequence[str]) -> int:
    """Start-up problems, one ``mend: error:`` line each (no traceback); exit status 2."""
    print("\n".join(f"mend: error: {problem}" for problem in problems), file=sys.stderr)
    return 2


def _run(args: argparse.Namespace) -> int:
    hangups = EarlyHangups()  # a SIGHUP from here on is a reload once mend serves, not its end
    try:
        settings, source = _settings_from_args(args)
        engine = Engine.load(settings)  # refuse to start on the errors `mend check` reports
    except RuleError as exc:  # one line a problem, as the logs and `mend check` say it
        return _errors(exc.problems)
    except StartupError as exc:
        return _errors(exc.problems)
    if tls_problems := check_files(settings):  # certificates, keys and CAs load, or no start
        return _errors([_tls_problem(exc, args) for exc in tls_problems])
    try:  # OTEL_* and tracing: are honoured, or no start
        tracing.check(settings.tracing, os.environ)
    except TracingError as exc:
        return _errors([str(exc)])
    if settings.workers > 1:
        run_workers(settings, source)
        return 0
    install_uvloop()
    try:
        asyncio.run(serve(settings, source=source, hangups=hangups, engine=engine))
    except OSError as exc:  # a listener could not bind: the port is taken, or not ours to take
        return _errors([_listen_problem(exc)])
    return 0


def _config(args: argparse.Namespace) -> int:
    """``mend config --schema``: the config file's JSON Schema, for editors and CI."""
    if args.schema:
        print(orjson.dumps(Settings.model_json_schema(), option=orjson.OPT_INDENT_2).decode())
        return 0
    print("mend config: give --schema", file=sys.stderr)
    return 2


def _check(args: argparse.Namespace) -> int:
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
    from proxy.tools import explain as explaining  # noqa: PLC0415 - a subcommand's own modules
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


def _test(args: argparse.Namespace) -> int:
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


def _explain(args: argparse.Namespace) -> int:
    from proxy.tools import explain as explaining  # noqa: PLC0415 - a subcommand's own modules
    from proxy.tools.ruletest.engines import engine_settings  # noqa: PLC0415

    if args.redact is not None:
        return _explain_redaction(args)
    if args.status is None:
        print("mend explain: give --status (or --redact FILE)", file=sys.stderr)
        return 2
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
            settings = engine_settings(
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
    try:
        request_body = _request_body(args)
    except OSError as exc:
        print(f"mend explain: {exc}", file=sys.stderr)
        return 2
    result = explaining.explain(
        engine, route.name, exchange, explaining.build_options(settings), request_body
    )
    spec = engine.specs.get(route.name)
    used = _explain_openapi(args, spec, route, result, request_body) if spec else None
    if args.json:
        document = explaining.as_json(result, show_all=args.all)
        print(orjson.dumps({**document, **({"openapi": used} if used else {})}).decode())
    else:
        print(explaining.as_text(result, show_all=args.all))
        if used:
            print("\nopenapi:\n" + orjson.dumps(used, option=orjson.OPT_INDENT_2).decode())
    return 0


def _explain_openapi(
    args: argparse.Namespace,
    spec: Spec,
    route: Route,
    result: explaining.Explanation,
    request_body: explaining.RequestBody,
) -> dict[str, Any]:
    """The route's document applied to the explained envelope (in place), and what it used."""
    from proxy.policy.openapi import report as openapi_report  # noqa: PLC0415
    from proxy.policy.openapi.enrich import Request as EnrichRequest  # noqa: PLC0415
    from proxy.policy.openapi.spec import Mount  # noqa: PLC0415
    from proxy.tools import explain as explaining  # noqa: PLC0415 - a subcommand's own modules

    sent = json_depth.loads(request_body.body) if request_body.body else NOT_JSON
    request = EnrichRequest(
        method=args.method.upper(),
        path=args.path.partition("?")[0],
        query=MultiDict(parse_qsl(args.query or "", keep_blank_values=True)),
        headers=CIMultiDict(explaining.parse_header(h) for h in args.request_header or ()),
        response_json=result.exchange.json if result.exchange.is_json else None,
        request_json=sent,
    )
    mount = Mount.of(route)
    evaluation = result.evaluation
    envelope, used = openapi_report.explained(
        spec, mount, request, evaluation.envelope if evaluation else None
    )
    if evaluation is not None and envelope is not None and result.protocol == "http":
        evaluation.envelope = envelope
    return used


def _explain_redaction(args: argparse.Namespace) -> int:
    """``explain --redact FILE``: the text as an agent and as the log get it, act by act, with
    the shipped detectors (and, with ``--config``, the route's ``redaction:`` additions)."""
    from proxy.policy.redaction import effects as redaction_explain  # noqa: PLC0415
    from proxy.tools import explain as explaining  # noqa: PLC0415 - a subcommand's own modules

    try:
        if args.redact == "-":
            text = sys.stdin.read()
        else:
            text = Path(args.redact).read_bytes().decode("utf-8", errors="replace")
        if args.config:
            settings = load_settings(Path(args.config))
            route = explaining.route_for(settings, args.route, args.path)
            detectors = Engine.load(settings).redactor_for(route.name).detectors
        else:
            detectors = build_set(load_shipped())
    except RuleError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"mend explain: {exc}", file=sys.stderr)
        return 2
    explained = redaction_explain.explain_text(text, detectors)
    if args.json:
        print(orjson.dumps(redaction_explain.as_json(explained)).decode())
    else:
        print(redaction_explain.as_text(explained), end="")
    return 0


def _request_body(args: argparse.Namespace) -> explaining.RequestBody:
    """``--protocol`` and the request's body and query, for a protocol's answer."""
    from proxy.tools import explain as explaining  # noqa: PLC0415 - a subcommand's own modules

    if args.request_body_file:
        body: bytes | None = Path(args.request_body_file).read_bytes()
    else:
        body = args.request_body.encode() if args.request_body is not None else None
    return explaining.RequestBody(ProtocolName(args.protocol), body, args.query or "")


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
        help="ids of 2xx-matching rules to run, e.g. 'slack.*' (repeatable; with --upstream)",
    )
    run.add_argument(
        "--protocol",
        choices=[p.value for p in ProtocolName],
        help="what agents speak (with --upstream): auto (default, detected per request), "
        "http, jsonrpc, mcp, graphql",
    )
    run.add_argument(
        "--read-timeout", type=float, help="seconds to the response headers (default 60)"
    )
    run.add_argument("--connect-timeout", type=float, help="seconds (with --upstream; default 5)")
    run.add_argument(
        "--openapi",
        metavar="FILE",
        help="the upstream's OpenAPI 3.0/3.1 document (with --upstream)",
    )
    run.add_argument(
        "--validate-requests",
        action="store_true",
        help="refuse requests the --openapi document calls invalid, before the upstream",
    )
    run.add_argument(
        "--mcp-tools",
        metavar="PATH",
        help="serve the --openapi document's operations as MCP tools at PATH (e.g. /mcp)",
    )
    run.add_argument(
        "--workers", type=int, help="processes sharing the agent port (SO_REUSEPORT); default 1"
    )
    run.add_argument("--no-default-packs", action="store_true", help="do not load rules/ packs")
    run.add_argument(
        "--no-watch",
        action="store_true",
        help="do not poll rule, config and certificate files (SIGHUP and POST /-/reload still do)",
    )
    run.add_argument(
        "--state",
        metavar="URL",
        help="where repeats, session patterns and circuits are kept: memory (default) or "
        "redis://host:port/db, shared by every replica using it",
    )
    tls = run.add_argument_group("TLS (certificates reload with the rules: SIGHUP, POST /-/reload)")
    tls.add_argument("--tls-cert", metavar="FILE", help="serve agents HTTPS with this PEM chain")
    tls.add_argument("--tls-key", metavar="FILE", help="its key (default: in the --tls-cert file)")
    tls.add_argument("--admin-tls-cert", metavar="FILE", help="serve the admin port HTTPS")
    tls.add_argument("--admin-tls-key", metavar="FILE", help="its key (default: in the cert file)")
    tls.add_argument(
        "--upstream-ca", metavar="FILE", help="CAs to verify the upstream by, not the system's"
    )
    tls.add_argument("--upstream-cert", metavar="FILE", help="client certificate (mutual TLS)")
    tls.add_argument("--upstream-key", metavar="FILE", help="its key (default: in the cert file)")
    tls.add_argument(
        "--upstream-server-name",
        metavar="NAME",
        help="name to send in SNI and check in the upstream's certificate (default: its host)",
    )
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
        "--openapi", metavar="FILE", help="validate an OpenAPI document and list its operations"
    )
    check.add_argument(
        "--no-default-packs", action="store_true", help="with --coverage: only PATHS' rules"
    )
    check.set_defaults(handler=_check)

    test = sub.add_parser("test", help="run rule test cases")
    test.add_argument("paths", nargs="*", help="case files or directories (default: rules/tests/)")
    test.add_argument("--rules", action="append", help="extra rule file for every case")
    test.add_argument("--no-default-packs", action="store_true", help="do not load rules/ packs")
    test.set_defaults(handler=_test)

    config = sub.add_parser("config", help="about the config file")
    config.add_argument("--schema", action="store_true", help="print its JSON Schema")
    config.set_defaults(handler=_config)

    exp = sub.add_parser("explain", help="show which rule a response matches, and why")
    exp.add_argument("--status", type=_status, help="the upstream's status (required)")
    exp.add_argument(
        "--redact",
        metavar="FILE",
        help="instead: which detector masks or removes which span of FILE's text ('-': stdin)",
    )
    exp.add_argument("--header", action="append", help="response header 'Name: value'")
    body = exp.add_mutually_exclusive_group()
    body.add_argument("--body-file", help="response body (Content-Type from .json/.html/.txt/.xml)")
    body.add_argument("--body", help="response body text")
    exp.add_argument("--method", default="GET", help="request method (default GET)")
    exp.add_argument("--path", default="/", help="request path (default /)")
    exp.add_argument("--request-header", action="append", help="request header 'Name: value'")
    exp.add_argument(
        "--protocol",
        choices=[p.value for p in ProtocolName],
        default=ProtocolName.HTTP.value,
        help="answer in the agent's protocol: auto, jsonrpc, mcp, graphql (default http)",
    )
    request_body = exp.add_mutually_exclusive_group()
    request_body.add_argument("--request-body", help="the request's body (a JSON-RPC call...)")
    request_body.add_argument("--request-body-file", help="the request's body, from a file")
    exp.add_argument("--query", help="the request's query string, without '?'")
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
    try:
        return int(args.handler(args))
    except BrokenPipeError:  # `mend config --schema | head`: the reader left, nothing to say
        sys.stderr.close()
        return 0
