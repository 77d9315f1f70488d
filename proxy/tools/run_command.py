"""``mend run``: the settings from the flags or ``--config``, checked, then served."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from proxy.config.certificates import TLSFileError, check_files
from proxy.config.otel import TracingError
from proxy.config.settings import Settings
from proxy.config.sources import ConfigSource, single_upstream
from proxy.config.yamlfile import RuleError
from proxy.observation import tracing
from proxy.policy.rules.ruleengine import Engine
from proxy.runtime.server import EarlyHangups, install_uvloop, serve
from proxy.runtime.workers import run_workers


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
    if getattr(args, "log_level", None):
        overrides["log_level"] = args.log_level
    if getattr(args, "workers", None):
        overrides["workers"] = args.workers
    if getattr(args, "public_url", None):
        overrides["public_url"] = args.public_url
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
            **({"retries": {"attempts": args.retries}} if args.retries is not None else {}),
            **_host_flags(args),
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
    "retries": "--retries",
    "openapi": "--openapi",
    "validate_requests": "--validate-requests",
    "allowed_host": "--allowed-host",
    "allowed_origin": "--allowed-origin",
}


def _host_flags(args: argparse.Namespace) -> dict[str, object]:
    """``--allowed-host`` and ``--allowed-origin`` as the single route's lists."""
    out: dict[str, object] = {}
    if getattr(args, "allowed_host", None):
        out["allowed_hosts"] = args.allowed_host
    if getattr(args, "allowed_origin", None):
        out["allowed_origins"] = args.allowed_origin
    return out


def _single_route_flags_unused(args: argparse.Namespace) -> None:
    """With ``--config``, a single-route flag would be silently ignored: refuse it instead."""
    given = [
        flag
        for key, flag in _SINGLE_ROUTE_FLAGS.items()
        if getattr(args, key, None) not in (None, False, [])
    ]
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
    "retries": "--retries",
    "attempts": "--retries",
    "workers": "--workers",
    "log_level": "--log-level",
    "rules": "--rules",
    "openapi": "--openapi",
    "validate_requests": "--validate-requests",
    "mcp_tools": "--mcp-tools",
    "state": "--state",
    "public_url": "--public-url",
    "allowed_hosts": "--allowed-host",
    "allowed_origins": "--allowed-origin",
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


def effective_settings(args: argparse.Namespace) -> Settings:
    """The settings ``mend run`` with these flags would run with (``mend config --show``);
    ``StartupError`` names every problem with them."""
    try:
        settings, _ = _settings_from_args(args)
    except RuleError as exc:
        raise StartupError(*exc.problems) from None
    return settings


def _checked(args: argparse.Namespace) -> tuple[Settings, ConfigSource | None, Engine]:
    """The settings, where they are read again from, and their engine, once everything a running
    mend needs loads; ``StartupError`` with every problem otherwise."""
    try:
        settings, source = _settings_from_args(args)
        engine = Engine.load(settings)  # refuse to start on the errors `mend check` reports
    except RuleError as exc:  # one line a problem, as the logs and `mend check` say it
        raise StartupError(*exc.problems) from None
    if tls_problems := check_files(settings):  # certificates, keys and CAs load, or no start
        raise StartupError(*(_tls_problem(exc, args) for exc in tls_problems))
    try:  # OTEL_* and tracing: are honoured, or no start
        tracing.check(settings.tracing, os.environ)
    except TracingError as exc:
        raise StartupError(str(exc)) from None
    return settings, source, engine


def run(args: argparse.Namespace) -> int:
    hangups = EarlyHangups()  # a SIGHUP from here on is a reload once mend serves, not its end
    try:
        settings, source, engine = _checked(args)
    except StartupError as exc:
        return _errors(exc.problems)
    if settings.workers > 1:
        run_workers(settings, source)
        return 0
    install_uvloop()
    try:
        asyncio.run(serve(settings, source=source, hangups=hangups, engine=engine))
    except OSError as exc:  # a listener could not bind: the port is taken, or not ours to take
        return _errors([_listen_problem(exc)])
    return 0
