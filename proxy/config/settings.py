"""Operator configuration: the ``--config`` file and the ``mend run`` flags, validated once."""

from __future__ import annotations

import importlib.resources
import importlib.util
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from yarl import URL

from proxy.config.choices import ProtocolName, Rendering
from proxy.config.crosscall import CircuitSettings, SessionSettings, StateSettings
from proxy.config.otel import TracingSettings
from proxy.config.redaction import RedactionSettings
from proxy.config.sourcefile import MAX_FILE_BYTES, read_text
from proxy.config.yamlfile import RuleError, parse_yaml, validation_problems


def _packaged_rules() -> Path:
    """The shipped packs (``*.yaml``) and their test cases (``tests/*.yaml``).

    An installed wheel carries them as package data, ``proxy/rules/``, found here through
    importlib.resources. A checkout, and an editable install (which imports the checkout), has no
    ``proxy/rules/``: there they are the top-level ``rules/`` that pyproject.toml maps into the
    wheel, read in place so that an edited pack needs no reinstall. Packs are read and watched as
    files: mend runs from an unpacked install (as pip installs a wheel), not from a zip.
    """
    installed = importlib.resources.files("proxy") / "rules"
    if isinstance(installed, Path) and installed.is_dir():
        return installed
    return Path(__file__).resolve().parent.parent.parent / "rules"


PACKAGED_RULES = _packaged_rules()


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def parse_hostport(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{value!r} is not HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


#: A DNS name, for SNI and the certificate's name check (no scheme, port or path).
_SERVER_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")


class UpstreamTLS(_Model):
    """How a route's connections to its ``https://`` upstream are secured (``proxy/edge/tls.py``).

    With no ``tls:`` block an https upstream is verified against the system's CAs by its URL's
    host, as curl and aiohttp do.
    """

    #: PEM bundle of the CAs to trust instead of the system's (curl ``--cacert``)
    ca_file: Path | None = None
    #: PEM client certificate (chain) for mutual TLS; its key in ``key_file`` or in the same file
    cert_file: Path | None = None
    key_file: Path | None = None
    #: the name sent in SNI and checked in the upstream's certificate, instead of the URL's host
    server_name: str | None = None
    #: false: accept any certificate (logged as a warning at start-up)
    verify: bool = True

    @field_validator("server_name")
    @classmethod
    def _dns_name(cls, value: str | None) -> str | None:
        if value is not None and not _SERVER_NAME.match(value):
            raise ValueError(f"server_name {value!r} is not a DNS name (no scheme, port or path)")
        return value

    @model_validator(mode="after")
    def _key_needs_cert(self) -> UpstreamTLS:
        if self.key_file is not None and self.cert_file is None:
            raise ValueError("tls.key_file needs tls.cert_file (the client certificate)")
        return self


class HealthCheck(_Model):
    """``GET <upstream base><path>`` every ``interval_s``: healthy on 2xx/3xx in ``timeout_s``."""

    path: str = Field(pattern=r"^/")
    interval_s: float = Field(10.0, gt=0)
    timeout_s: float = Field(2.0, gt=0)


#: ``retry_safe[].operation``: a method, a space, a path glob.
_OPERATION = re.compile(r"^[A-Z]{1,16} /\S*$")


class RetrySafe(_Model):
    """One override of the retry advice for a request that may already have taken effect
    (CONTRACT §1, ``proxy/policy/resend.py``): whether the requests it names are safe to send again,
    whatever their method or the MCP tool's annotations say. First match wins."""

    #: an MCP tool's name, or a glob of names (``search_*``)
    tool: str | None = Field(None, min_length=1, max_length=256)
    #: ``METHOD /path-glob`` of the agent's request path (``**`` crosses slashes, ``*`` not)
    operation: str | None = Field(None, max_length=1024)
    safe: bool

    @field_validator("operation")
    @classmethod
    def _operation(cls, value: str | None) -> str | None:
        if value is not None and not _OPERATION.match(value):
            raise ValueError(f"operation {value!r} is not 'METHOD /path' (e.g. 'POST /api/search')")
        return value

    @model_validator(mode="after")
    def _one_target(self) -> RetrySafe:
        if (self.tool is None) == (self.operation is None):
            raise ValueError("a retry_safe entry names either a tool or an operation")
        return self


class Route(_Model):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    prefix: str = "/"
    upstream: str
    strip_prefix: bool = False
    rules: tuple[Path, ...] = ()
    rendering: Rendering = Rendering.JSON
    force_rendering: bool = False
    status: Literal["upstream", 200] = "upstream"
    success_rules: tuple[str, ...] = ()
    #: what agents speak on this route: auto (detected per request), http, jsonrpc, mcp, graphql
    protocol: ProtocolName = ProtocolName.AUTO
    #: seconds to open a connection to the upstream (Envoy's ``connect_timeout``, 5 s)
    connect_timeout: float = Field(5.0, gt=0)
    #: seconds, once the request is sent, to the response headers (nginx ``proxy_read_timeout``)
    read_timeout: float = Field(60.0, gt=0)
    #: seconds between two bytes of a response body (Envoy's ``stream_idle_timeout``, 5 min)
    idle_timeout: float = Field(300.0, gt=0)
    #: seconds to read a whole error body (or a success peek) that a rule set inspects
    error_body_timeout: float = Field(30.0, gt=0)
    preserve_host: bool = False
    #: ``Location``, ``Content-Location`` and ``Refresh`` naming the upstream's origin are
    #: rewritten to the agent's origin and this route's prefix (nginx ``proxy_redirect default``)
    rewrite_redirects: bool = True
    #: TLS to an https:// upstream: trust, client certificate, server name
    tls: UpstreamTLS | None = None
    #: an active health check; while it fails, /readyz answers 503 naming this route
    health_check: HealthCheck | None = None
    #: this route's redaction additions, on top of the top-level ``redaction:`` ones
    redaction: RedactionSettings = RedactionSettings()
    #: the upstream's OpenAPI document (3.0 or 3.1, YAML or JSON): operations, allowed values,
    #: example requests and next operations in envelopes (proxy/policy/openapi/); reloaded with the
    #: rules
    openapi: Path | None = None
    #: check each request against its documented operation; an invalid one gets VALIDATION_FAILED
    #: with every violation and never reaches the upstream (needs ``openapi``)
    validate_requests: bool = False
    #: which requests are safe to send again after mend sent them and got no answer, beyond
    #: what their method (or an MCP tool's annotations) says; first match wins
    retry_safe: tuple[RetrySafe, ...] = ()
    #: serve the document's operations as MCP tools at ``<prefix><mcp_tools>`` (CONTRACT §9;
    #: proxy/edge/mcptools/); needs ``openapi``
    mcp_tools: str | None = Field(None, pattern=r"^/[A-Za-z0-9._~/-]{0,200}$")

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("a route prefix starts with '/'")
        return value

    @field_validator("upstream")
    @classmethod
    def _upstream(cls, value: str) -> str:
        url = URL(value)
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"upstream {value!r} must be an http:// or https:// URL with a host")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _tls_needs_https(self) -> Route:
        if self.tls is not None and not self.upstream.lower().startswith("https://"):
            raise ValueError(f"TLS settings apply to an https:// upstream, not {self.upstream!r}")
        return self

    @model_validator(mode="after")
    def _validation_needs_document(self) -> Route:
        if self.validate_requests and self.openapi is None:
            raise ValueError(
                "validate_requests: true needs openapi: FILE (the document to check by)"
            )
        if self.mcp_tools is not None and self.openapi is None:
            raise ValueError("mcp_tools: PATH needs openapi: FILE (the document of the tools)")
        if self.mcp_tools is not None and importlib.util.find_spec("mcp") is None:
            raise ValueError("mcp_tools: PATH needs the MCP SDK: pip install 'mend[mcp]'")
        return self


class Settings(_Model):
    listen: str = "127.0.0.1:8080"
    admin_listen: str = "127.0.0.1:9464"
    rules: tuple[Path, ...] = ()
    default_packs: bool = True
    disabled_packs: tuple[str, ...] = ()
    routes: tuple[Route, ...] = Field(min_length=1)
    public_url: str | None = None
    retry_after_default_ms: int = Field(1000, ge=0)
    retry_after_max_ms: int = Field(3_600_000, ge=0)
    error_body_max_bytes: int = Field(1 << 20, gt=0)
    decompressed_max_bytes: int = Field(8 << 20, gt=0)
    success_peek_bytes: int = Field(8 << 10, gt=0)
    request_body_max_bytes: int | None = Field(None, gt=0)
    response_body_max_bytes: int | None = Field(None, gt=0)
    watch_rules: bool = True
    #: the largest rule, detector (and config) file mend reads; a larger one is refused
    max_file_bytes: int = Field(MAX_FILE_BYTES, gt=0, le=1 << 30)
    workers: int = Field(1, ge=1)
    # --- agent connections: every wait bounded, every table capped (README "Limits") ---------
    #: seconds for a client to send a whole request head (nginx ``client_header_timeout``)
    client_header_timeout: float = Field(60.0, gt=0)
    #: seconds between two reads of a request body (nginx ``client_body_timeout``)
    client_body_timeout: float = Field(60.0, gt=0)
    #: bytes/s a request body must average after its first 5 s (Kestrel's
    #: ``MinRequestBodyDataRate``, 240): a body dripped a byte a second never trips the timeout
    #: above. None: no minimum.
    client_body_min_rate: int | None = Field(240, gt=0)
    #: seconds an idle keep-alive connection stays open (nginx ``keepalive_timeout``)
    keepalive_timeout: float = Field(75.0, gt=0)
    #: open agent connections per process; past it, a 503 envelope and the connection closed
    max_connections: int = Field(4096, gt=0)
    #: open connections per client address (None: no per-client limit)
    max_connections_per_client: int | None = Field(None, gt=0)
    #: bytes of a request line (Envoy: 60 KiB of request headers, request line included)
    max_request_line: int = Field(64 << 10, ge=1024)
    #: bytes of one request header field
    max_header_size: int = Field(64 << 10, ge=1024)
    #: request header fields (Envoy's ``max_headers_count``, 100)
    max_headers: int = Field(100, ge=8)
    #: 1xx interim responses an upstream may send before its final response
    max_interim_responses: int = Field(8, ge=1)
    #: seconds to finish requests in flight after SIGTERM, all workers together
    shutdown_timeout: float = Field(25.0, gt=0)
    #: bearer token for mutating admin endpoints (POST /-/reload); MEND_ADMIN_TOKEN sets it too
    admin_token: str | None = Field(
        default_factory=lambda: os.environ.get("MEND_ADMIN_TOKEN") or None, min_length=16
    )
    # --- TLS for agents and the admin port (``proxy/edge/tls.py``); reloaded with the rules
    # --------
    #: PEM certificate (chain) served on the agent port; its key in ``tls_key`` or the same file
    tls_cert: Path | None = None
    tls_key: Path | None = None
    #: the same for the admin port
    admin_tls_cert: Path | None = None
    admin_tls_key: Path | None = None
    #: what redaction adds for every route: secrets, internal names, words never shown, allowed
    #: ids, detector files (``proxy/config/redaction.py``); reloaded with the rules
    redaction: RedactionSettings = RedactionSettings()
    # --- the cross-call view (``proxy/policy/crosscall``, CONTRACT §7)
    # -------------------------------
    #: how sessions are told apart, and when a repeat is a loop
    session: SessionSettings = Field(default_factory=SessionSettings)
    #: ``memory`` or ``redis://host:port/db`` (``--state``), and how long to wait for it
    state: StateSettings = StateSettings()
    #: each route's circuit breaker
    circuit: CircuitSettings = CircuitSettings()
    #: OpenTelemetry traces over OTLP (``proxy/observation/tracing.py``); the ``OTEL_*`` variables
    #: fill it
    tracing: TracingSettings = TracingSettings()

    @field_validator("listen", "admin_listen")
    @classmethod
    def _hostport(cls, value: str) -> str:
        parse_hostport(value)
        return value

    @model_validator(mode="after")
    def _keys_need_certs(self) -> Settings:
        for prefix in ("", "admin_"):
            if getattr(self, f"{prefix}tls_key") and not getattr(self, f"{prefix}tls_cert"):
                raise ValueError(f"{prefix}tls_key needs {prefix}tls_cert (the certificate)")
        return self

    def rule_paths(self) -> list[Path]:
        """Operator files first (their rules win), then the shipped packs."""
        return [*self.rules, *([PACKAGED_RULES] if self.default_packs else [])]


#: Settings a running mend cannot change: the listeners, the process model and what each agent
#: connection is opened with are set up once. A reload that changes one names it in the log
#: (``config_restart_needed``) and keeps the value in force; every other setting applies at once.
RESTART_SETTINGS = (
    "listen",
    "admin_listen",
    "workers",
    "max_connections",
    "max_connections_per_client",
    "client_header_timeout",
    "keepalive_timeout",
    "max_request_line",
    "max_header_size",
    "max_headers",
    "shutdown_timeout",
    "watch_rules",
    "admin_token",
    # the cross-call view's store, session keys and circuits are built once, at start
    "session",
    "state",
    "circuit",
    # each process makes its tracer once, at start
    "tracing",
)


def needs_restart(running: Settings, loaded: Settings) -> list[str]:
    """The settings ``loaded`` changes that only a restart applies. A listener's certificate
    files may move on reload, but one cannot start or stop serving TLS."""
    changed = [key for key in RESTART_SETTINGS if getattr(running, key) != getattr(loaded, key)]
    for key in ("tls_cert", "admin_tls_cert"):
        if (getattr(running, key) is None) != (getattr(loaded, key) is None):
            changed.append(key)
    return changed


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
        raise RuleError(validation_problems(exc, name, lines)) from exc


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
