"""Where the settings come from: a config file (read again on each reload) or the run flags."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from proxy.config.crosscall import StateSettings
from proxy.config.settings import Settings
from proxy.config.sourcefile import read_text
from proxy.config.yamlfile import RuleError, parse_yaml, validation_problems


def single_upstream(
    route: Mapping[str, object], rules: Sequence[str], overrides: Mapping[str, object]
) -> Settings:
    """``mend run --upstream URL``'s settings: one route, ``default`` at ``/``, with ``route``'s
    keys (from the flags), the ``--rules`` files and the other flags' ``overrides``;
    ``ValidationError`` as pydantic words it (the command line names the flags)."""
    return Settings.model_validate(
        {
            "routes": [{"name": "default", "prefix": "/", **route}],
            "rules": list(rules),
            **overrides,
        }
    )


@dataclass(frozen=True)
class ConfigSource:
    """Where ``mend run --config`` settings come from, to be read again on every reload: the
    file, the flags that override its keys, and the ``--rules`` files added before its own.
    Plain data, so a ``--workers`` child gets it too."""

    path: Path
    overrides: dict[str, object] = field(default_factory=dict)
    extra_rules: tuple[Path, ...] = ()
    #: ``--state URL``: the store's URL replaced, the rest of the file's ``state:`` kept
    state_url: str | None = None

    def load(self) -> Settings:
        """The settings as the file says now; ``RuleError`` with ``file:line`` problems."""
        settings = load_settings(self.path, dict(self.overrides))
        if self.extra_rules:
            settings = settings.model_copy(update={"rules": (*self.extra_rules, *settings.rules)})
        if self.state_url is not None:
            try:
                state = StateSettings.model_validate(
                    {**settings.state.model_dump(), "url": self.state_url}
                )
            except ValidationError as exc:
                raise RuleError([f"--state: {e['msg']}" for e in exc.errors()]) from None
            settings = settings.model_copy(update={"state": state})
        return settings


def load_settings(path: Path, overrides: dict[str, object] | None = None) -> Settings:
    """Read a config file; relative rule paths are relative to the file. ``RuleError`` on error."""
    name = str(path)
    try:
        text = read_text(path)  # the default cap: the file's own max_file_bytes is not known yet
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError([f"{name}:1: cannot read config: {exc}"]) from exc
    data, lines = parse_yaml(text, name)
    if not isinstance(data, dict):
        raise RuleError([f"{name}:1: a config file is a mapping (listen:, routes:, ...)"])
    base = path.resolve().parent
    _relative_tls_files(data, base)  # before the overrides: flags are relative to the cwd
    data = {**data, **(overrides or {})}
    data["rules"] = [str(base / p) for p in data.get("rules") or []]
    for route in data.get("routes") or []:
        if isinstance(route, dict):
            route["rules"] = [str(base / p) for p in route.get("rules") or []]
            if isinstance(route.get("openapi"), str) and route["openapi"]:
                route["openapi"] = str(base / route["openapi"])
    _relative_detector_files(data, base)
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise RuleError(validation_problems(exc, name, lines, Settings)) from exc


#: Certificate and key files in a config file, top level and in a route's ``tls:``.
TLS_FILE_KEYS = ("tls_cert", "tls_key", "admin_tls_cert", "admin_tls_key")
ROUTE_TLS_FILE_KEYS = ("ca_file", "cert_file", "key_file")


def _relative_detector_files(data: dict[str, object], base: Path) -> None:
    """``redaction.detectors`` paths, top level and per route, relative to the config file."""
    routes = data.get("routes")
    for holder in [data, *(routes if isinstance(routes, list) else ())]:
        redaction = holder.get("redaction") if isinstance(holder, dict) else None
        if isinstance(redaction, dict) and isinstance(redaction.get("detectors"), list):
            redaction["detectors"] = [
                str(base / p) if isinstance(p, str) else p for p in redaction["detectors"]
            ]


def _relative_tls_files(data: dict[str, object], base: Path) -> None:
    """Make the config's certificate and key paths relative to the file, as its rule paths are."""
    for key in TLS_FILE_KEYS:
        if isinstance(value := data.get(key), str) and value:
            data[key] = str(base / value)
    routes = data.get("routes")
    for route in routes if isinstance(routes, list) else ():
        tls = route.get("tls") if isinstance(route, dict) else None
        if isinstance(tls, dict):
            for key in ROUTE_TLS_FILE_KEYS:
                if isinstance(value := tls.get(key), str) and value:
                    tls[key] = str(base / value)
