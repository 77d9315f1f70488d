"""Operator configuration: the ``--config`` file and the ``mend run`` flags, validated once."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from yarl import URL

from proxy.render import Rendering
from proxy.rulefile import RuleError, parse_yaml, validation_problems


def _packaged_rules() -> Path:
    """The packs shipped in rules/: beside the package in a checkout or editable install, else
    where a wheel install puts its data files (``<prefix>/share/mend/rules``)."""
    checkout = Path(__file__).resolve().parent.parent / "rules"
    return checkout if checkout.is_dir() else Path(sys.prefix) / "share" / "mend" / "rules"


PACKAGED_RULES = _packaged_rules()


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def parse_hostport(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{value!r} is not HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


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
    #: seconds to open a connection to the upstream (Envoy's ``connect_timeout``, 5 s)
    connect_timeout: float = Field(5.0, gt=0)
    #: seconds, once the request is sent, to the response headers (nginx ``proxy_read_timeout``)
    read_timeout: float = Field(60.0, gt=0)
    #: seconds between two bytes of a response body (Envoy's ``stream_idle_timeout``, 5 min)
    idle_timeout: float = Field(300.0, gt=0)
    #: seconds to read a whole error body (or a success peek) that a rule set inspects
    error_body_timeout: float = Field(30.0, gt=0)
    preserve_host: bool = False

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

    @field_validator("listen", "admin_listen")
    @classmethod
    def _hostport(cls, value: str) -> str:
        parse_hostport(value)
        return value

    def rule_paths(self) -> list[Path]:
        """Operator files first (their rules win), then the shipped packs."""
        return [*self.rules, *([PACKAGED_RULES] if self.default_packs else [])]


def load_settings(path: Path, overrides: dict[str, object] | None = None) -> Settings:
    """Read a config file; relative rule paths are relative to the file. ``RuleError`` on error."""
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RuleError([f"{name}:1: cannot read config: {exc}"]) from exc
    data, lines = parse_yaml(text, name)
    if not isinstance(data, dict):
        raise RuleError([f"{name}:1: a config file is a mapping (listen:, routes:, ...)"])
    base = path.resolve().parent
    data = {**data, **(overrides or {})}
    data["rules"] = [str(base / p) for p in data.get("rules") or []]
    for route in data.get("routes") or []:
        if isinstance(route, dict):
            route["rules"] = [str(base / p) for p in route.get("rules") or []]
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise RuleError(validation_problems(exc, name, lines)) from exc
