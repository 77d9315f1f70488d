"""One route of the settings: its upstream, prefix, protocol, rules, TLS, health check, retries."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from yarl import URL

from proxy.config.choices import ProtocolName, Rendering
from proxy.config.model import Frozen
from proxy.config.redaction import RedactionSettings
from proxy.config.retries import Retries

#: A DNS name, for SNI and the certificate's name check (no scheme, port or path).
_SERVER_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")


class UpstreamTLS(Frozen):
    """How a route's connections to its ``https://`` upstream are secured (``certificates.py``).

    With no ``tls:`` block an https upstream is verified against the system's CAs by its URL's
    host, as curl and aiohttp do.
    """

    #: PEM bundle of the CAs to trust instead of the system's (curl ``--cacert``)
    ca_file: Path | None = None
    #: PEM client certificate (chain) for mutual TLS; its key in ``key_file`` or in the same file
    cert_file: Path | None = None
    #: PEM private key of ``cert_file``, if not in that file
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


class HealthCheck(Frozen):
    """``GET <upstream base><path>`` every ``interval_s``: healthy on 2xx/3xx in ``timeout_s``."""

    #: the path below the upstream's base URL that is fetched
    path: str = Field(pattern=r"^/")
    #: seconds between two checks
    interval_s: float = Field(10.0, gt=0)
    #: seconds a check may take before it counts as failed
    timeout_s: float = Field(2.0, gt=0)


#: ``allowed_hosts`` entries: a DNS name or address, then a port, ``:*`` (any port) or nothing;
#: or ``*`` (any host)
_ALLOWED_HOST = re.compile(
    r"^(\*|([A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]{2,45}\])(:(\d{1,5}|\*))?)$"
)
#: ``allowed_origins`` entries: ``http://`` or ``https://`` and an ``allowed_hosts`` entry; or ``*``
_ALLOWED_ORIGIN = re.compile(r"^(\*|https?://(?!\*)\S+)$")

#: ``retry_safe[].operation``: a method, a space, a path glob.
_OPERATION = re.compile(r"^[A-Z]{1,16} /\S*$")


class RetrySafe(Frozen):
    """One override of the retry advice for a request that may already have taken effect
    (docs/contract.md §1, ``proxy/policy/retry/resend.py``): whether the requests it names are safe
    to send again, whatever their method or the MCP tool's annotations say. First match wins."""

    #: an MCP tool's name, or a glob of names (``search_*``)
    tool: str | None = Field(None, min_length=1, max_length=256)
    #: ``METHOD /path-glob`` of the agent's request path (``**`` crosses slashes, ``*`` not)
    operation: str | None = Field(None, max_length=1024)
    #: whether the requests this entry names may be sent again
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


class Route(Frozen):
    #: the route's metric label: short and fixed
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    #: the path prefix it serves; the longest prefix wins
    prefix: str = "/"
    #: ``http://`` or ``https://`` URL of the API, with an optional base path
    upstream: str
    #: forward ``/prefix/x`` as ``<base>/x``
    strip_prefix: bool = False
    #: this route's own rule files, loaded first of all (relative to the config file)
    rules: tuple[Path, ...] = ()
    #: the envelope's rendering when ``Accept`` does not decide
    rendering: Rendering = Rendering.JSON
    #: use ``rendering`` whatever ``Accept`` says
    force_rendering: bool = False
    #: the envelope's status: the upstream's, or 200 for tool layers that drop non-2xx bodies
    status: Literal["upstream", 200] = "upstream"
    #: globs of the 2xx-matching rules this route runs (``slack.*``); protocol errors need none
    success_rules: tuple[str, ...] = ()
    #: what agents speak on this route: auto (detected per request), http, jsonrpc, mcp, graphql
    protocol: ProtocolName = ProtocolName.AUTO
    #: MCP: how a tool's failure that came as a JSON-RPC error (or as no JSON-RPC at all)
    #: reaches the client: ``result``, an ``isError`` result the model reads (most agent
    #: frameworks hand the model results, not errors), or ``error``, kept a JSON-RPC error
    tool_errors: Literal["result", "error"] = "result"
    #: seconds to open a connection to the upstream (Envoy's ``connect_timeout``, 5 s)
    connect_timeout: float = Field(5.0, gt=0)
    #: seconds, once the request is sent, to the response headers (nginx ``proxy_read_timeout``)
    read_timeout: float = Field(60.0, gt=0)
    #: seconds between two bytes of a response body (Envoy's ``stream_idle_timeout``, 5 min)
    idle_timeout: float = Field(300.0, gt=0)
    #: seconds to read a whole error body (or a success peek) that a rule set inspects
    error_body_timeout: float = Field(30.0, gt=0)
    #: forward the agent's ``Host`` instead of the upstream's
    preserve_host: bool = False
    #: the ``Host`` values agents reach this route by (``host``, ``host:port``, ``host:*``, or
    #: ``*``), as the MCP SDKs' ``allowed_hosts``: MCP requests with another are refused with
    #: 403, and mend writes no URL from another. Unset: the localhost forms, mend's listen
    #: address and ``public_url``'s host (proxy/edge/hosts.py)
    allowed_hosts: tuple[str, ...] | None = Field(None, max_length=256)
    #: the ``Origin`` values MCP requests may carry (``https://app.example``,
    #: ``http://localhost:*``, ``*``); unset: the allowed hosts' http and https origins
    allowed_origins: tuple[str, ...] | None = Field(None, max_length=256)
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
    #: this route's retry policy (docs/retries.md), in place of the top-level ``retries:``
    retries: Retries | None = None
    #: serve the document's operations as MCP tools at ``<prefix><mcp_tools>`` (docs/contract.md §9;
    #: proxy/edge/mcptools/); needs ``openapi``
    mcp_tools: str | None = Field(None, pattern=r"^/[A-Za-z0-9._~/-]{0,200}$")

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("a route prefix starts with '/'")
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _allowed_hosts(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for entry in value or ():
            if not _ALLOWED_HOST.match(entry):
                raise ValueError(
                    f"allowed_hosts entry {entry!r} is not host, host:port, host:* or *"
                )
        return value

    @field_validator("allowed_origins")
    @classmethod
    def _allowed_origins(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for entry in value or ():
            host = entry.partition("://")[2]
            if not _ALLOWED_ORIGIN.match(entry) or not _ALLOWED_HOST.match(host or "*"):
                raise ValueError(
                    f"allowed_origins entry {entry!r} is not http(s)://host[:port|:*] or *"
                )
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


def below(prefix: str) -> str:
    """What a path below the route ``prefix`` starts with: the prefix and one slash (``/api``
    serves ``/api`` and ``/api/x``, not ``/apix``)."""
    return prefix if prefix.endswith("/") else prefix + "/"
