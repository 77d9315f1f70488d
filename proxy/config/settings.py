"""Operator configuration: the ``--config`` file and the ``mend run`` flags, validated once."""

from __future__ import annotations

import importlib.resources
import importlib.util
import os
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from proxy.config.crosscall import CircuitSettings, SessionSettings, StateSettings
from proxy.config.model import Frozen
from proxy.config.otel import TracingSettings
from proxy.config.redaction import RedactionSettings
from proxy.config.retries import Retries
from proxy.config.route import Route
from proxy.config.sourcefile import MAX_FILE_BYTES


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


def parse_hostport(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{value!r} is not HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


class Settings(Frozen):
    #: HOST:PORT where agents connect (``--listen``)
    listen: str = "127.0.0.1:8080"
    #: HOST:PORT of the admin port: ``/metrics``, ``/healthz``, ``/readyz``, ``POST /-/reload``
    #: (``--admin-listen``)
    admin_listen: str = "127.0.0.1:9464"
    #: your rule files and directories, loaded before the packs so yours win (relative to the config
    #: file)
    rules: tuple[Path, ...] = ()
    #: load the shipped packs of ``rules/`` (``--no-default-packs`` turns them off)
    default_packs: bool = True
    #: shipped packs to leave out, by name (``soap``, ``graphql``, ...)
    disabled_packs: tuple[str, ...] = ()
    #: one or more routes to upstreams; the longest matching prefix wins
    routes: tuple[Route, ...] = Field(min_length=1)
    #: mend's URL as agents reach it: the base of ``docs_url``, rewritten redirects and
    #: protected-resource metadata; unset: the URL the agent used when its host is allowed
    #: (``allowed_hosts``), else links and redirects are paths
    public_url: str | None = None
    #: ``retry_after_ms`` of a retryable error when nothing says when
    retry_after_default_ms: int = Field(1000, ge=0)
    #: the most ``retry_after_ms`` can say
    retry_after_max_ms: int = Field(3_600_000, ge=0)
    #: an error body is read up to this; the rest is discarded
    error_body_max_bytes: int = Field(1 << 20, gt=0)
    #: an error body is decompressed up to this
    decompressed_max_bytes: int = Field(8 << 20, gt=0)
    #: a success on a route with ``success_rules`` is read up to this to be inspected; longer ones
    #: stream through
    success_peek_bytes: int = Field(8 << 10, gt=0)
    #: ``REQUEST_TOO_LARGE`` (413) above this (streamed bodies are counted); unset: no limit
    request_body_max_bytes: int | None = Field(None, gt=0)
    #: ``UPSTREAM_RESPONSE_TOO_LARGE`` (502) above this ``Content-Length``; unset: no limit
    response_body_max_bytes: int | None = Field(None, gt=0)
    #: reload when the config, rule, detector or certificate files change (``--no-watch`` turns it
    #: off); SIGHUP and ``POST /-/reload`` reload either way
    watch_rules: bool = True
    #: the largest rule, detector (and config) file mend reads; a larger one is refused
    max_file_bytes: int = Field(MAX_FILE_BYTES, gt=0, le=1 << 30)
    #: processes sharing the agent port (SO_REUSEPORT, ``--workers``); the parent serves the admin
    #: port
    workers: int = Field(1, ge=1)
    # --- the log (``proxy/observation/logs.py``, ``proxy/runtime/record.py``) -----------------
    #: the least severe line written: debug, info, warning or error (``--log-level``); request
    #: lines are info lines
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    #: ``false``: no per-request line at all (nginx ``access_log off``)
    access_log: bool = True
    #: the share of successful requests that get a line, 0.0 to 1.0 (Envoy's runtime sampling);
    #: a request answered with status 400 or above, an envelope or a failure always gets one
    access_log_sample: float = Field(1.0, ge=0.0, le=1.0)
    # --- agent connections: every wait bounded, every table capped (docs/operations.md "Limits")
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
    #: seconds a response may wait for the agent to take any of it (nginx ``send_timeout``)
    send_timeout: float = Field(60.0, gt=0)
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
    #: the private key of ``tls_cert``, if not in that file (``--tls-key``)
    tls_key: Path | None = None
    #: the same for the admin port
    admin_tls_cert: Path | None = None
    #: the private key of ``admin_tls_cert``, if not in that file (``--admin-tls-key``)
    admin_tls_key: Path | None = None
    #: what redaction adds for every route: secrets, internal names, words never shown, allowed
    #: ids, detector files (``proxy/config/redaction.py``); reloaded with the rules
    redaction: RedactionSettings = RedactionSettings()
    # --- the cross-call view (``proxy/policy/crosscall``, docs/contract.md §7)
    # -------------------------------
    #: how sessions are told apart, and when a repeat is a loop
    session: SessionSettings = Field(default_factory=SessionSettings)
    #: ``memory`` or ``redis://host:port/db`` (``--state``), and how long to wait for it
    state: StateSettings = StateSettings()
    #: each route's circuit breaker
    circuit: CircuitSettings = CircuitSettings()
    #: every route's retry policy unless it has its own (docs/retries.md): failures the envelope
    #: would call retryable are sent again before the agent sees them
    retries: Retries = Retries()
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
    "send_timeout",
    "max_request_line",
    "max_header_size",
    "max_headers",
    "shutdown_timeout",
    "watch_rules",
    "admin_token",
    # each process makes its logger once, at start
    "log_level",
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
