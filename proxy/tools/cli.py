"""The ``mend`` command line (and ``python -m proxy``): its flags, and which command each runs."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from proxy import __version__
from proxy.config.choices import ProtocolName
from proxy.observation.logs import LEVELS

if TYPE_CHECKING:  # generic for type checkers only
    #: What ``add_subparsers`` returns: each command's parser is added to it.
    _Commands = argparse._SubParsersAction[argparse.ArgumentParser]


def _status(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an HTTP status") from None
    if not 100 <= value <= 599:
        raise argparse.ArgumentTypeError(f"{value} is not between 100 and 599")
    return value


def _run_parser(sub: _Commands) -> None:
    """``mend run``'s flags."""
    run = sub.add_parser("run", help="run the proxy")
    _run_flags(run)
    run.set_defaults(handler="run_command:run")


def _run_flags(run: argparse.ArgumentParser) -> None:
    """The flags of ``mend run``, which ``mend config --show`` takes too."""
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
        "--retries",
        type=int,
        metavar="N",
        help="tries in all of a request whose failure may be retried (default 2; 1: no "
        "retries; with --upstream; docs/retries.md)",
    )
    run.add_argument(
        "--workers", type=int, help="processes sharing the agent port (SO_REUSEPORT); default 1"
    )
    run.add_argument(
        "--public-url",
        metavar="URL",
        help="mend's URL as agents reach it (docs_url, redirects, protected-resource metadata)",
    )
    run.add_argument(
        "--allowed-host",
        action="append",
        metavar="HOST",
        help="a Host agents reach the route by (host, host:port, host:*, *; repeatable; with "
        "--upstream): MCP requests naming another are refused (default: localhost forms, "
        "--listen, --public-url's host)",
    )
    run.add_argument(
        "--allowed-origin",
        action="append",
        metavar="ORIGIN",
        help="an Origin MCP requests may carry (https://app.example, http://localhost:*, *; "
        "repeatable; with --upstream; default: the allowed hosts' origins)",
    )
    run.add_argument("--no-default-packs", action="store_true", help="do not load rules/ packs")
    run.add_argument(
        "--log-level",
        choices=list(LEVELS),
        help="the least severe log line written: debug, info (default), warning, error",
    )
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


def _check_parser(sub: _Commands) -> None:
    """``mend check``'s flags."""
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
    check.set_defaults(handler="check_command:check")


def _test_parser(sub: _Commands) -> None:
    """``mend test``'s flags."""
    test = sub.add_parser("test", help="run rule test cases")
    test.add_argument("paths", nargs="*", help="case files or directories (default: rules/tests/)")
    test.add_argument("--rules", action="append", help="extra rule file for every case")
    test.add_argument("--no-default-packs", action="store_true", help="do not load rules/ packs")
    test.set_defaults(handler="check_command:test")


def _config_parser(sub: _Commands) -> None:
    """``mend config``'s flags."""
    config = sub.add_parser(
        "config",
        help="the effective configuration, or the config file's schema",
        description="--show prints the settings `mend run` would run with, given the same "
        "flags (--config FILE, or --upstream URL and the rest), defaults included and secrets "
        "masked, as YAML; --schema prints the config file's JSON Schema.",
    )
    what = config.add_mutually_exclusive_group()
    what.add_argument(
        "--show",
        action="store_true",
        help="print the effective configuration as YAML (secrets masked); with mend run's flags",
    )
    what.add_argument("--schema", action="store_true", help="print the config file's JSON Schema")
    _run_flags(config)
    config.set_defaults(handler="check_command:config", usage=config.format_help)


def _explain_parser(sub: _Commands) -> None:
    """``mend explain``'s flags."""
    exp = sub.add_parser("explain", help="show which rule a response matches, and why")
    exp.add_argument(
        "--status", type=_status, help="the upstream's status (required, unless --redact)"
    )
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
        help="what the agent speaks: auto (detected from the request, as mend run does), http, "
        "jsonrpc, mcp, graphql (default: the route's protocol, auto unless --config sets one)",
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
    exp.set_defaults(handler="explain_command:explain")


def _suggest_parser(sub: _Commands) -> None:
    """``mend suggest``'s flags."""
    suggest = sub.add_parser(
        "suggest", help="rules proposed for the errors only a fallback explained"
    )
    suggest.add_argument(
        "--admin",
        default="127.0.0.1:9464",
        help="the running mend's admin port, HOST:PORT or URL (default 127.0.0.1:9464)",
    )
    suggest.add_argument(
        "--token", help="the admin token, when one is set (default: $MEND_ADMIN_TOKEN)"
    )
    suggest.add_argument(
        "--out",
        metavar="DIR",
        help="write DIR/<name>.yaml and DIR/tests/<name>.yaml instead of printing them",
    )
    suggest.set_defaults(handler="suggest_command:suggest")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mend", description="Turns legacy API errors into agent-readable envelopes."
    )
    parser.add_argument("--version", action="version", version=f"mend {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _run_parser(sub)
    _check_parser(sub)
    _test_parser(sub)
    _config_parser(sub)
    _explain_parser(sub)
    _suggest_parser(sub)
    return parser


def _handler(target: str) -> Callable[[argparse.Namespace], int]:
    """The function a command runs (``module:function`` of ``proxy.tools``), imported only when
    that command runs: ``mend run`` does not load what ``mend check`` or ``suggest`` need."""
    module, name = target.split(":")
    handler: Callable[[argparse.Namespace], int] = getattr(
        importlib.import_module(f"proxy.tools.{module}"), name
    )
    return handler


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(_handler(args.handler)(args))
    except BrokenPipeError:  # `mend config --schema | head`: the reader left, nothing to say
        sys.stderr.close()
        return 0
