"""The hosts a route is reached by: checked on MCP requests, and the only ones mend names itself by.

A proxy in front of an MCP server must not switch off the server's DNS-rebinding protection
(docs/contract.md §6): mend sends the upstream its own ``Host``, so the upstream's check of the
agent's
``Host`` and ``Origin`` can no longer see them. mend makes that check itself, as the MCP SDKs do
(the TypeScript SDK's ``hostHeaderValidation``, the Python SDK's ``TransportSecuritySettings``):
a ``Host`` outside the allowed ones, or an ``Origin`` outside the allowed origins, is refused
with 403 before anything is sent.

The same list keeps a request's ``Host`` out of every URL mend writes (docs/contract.md §3:
``docs_url``,
rewritten redirects, protected-resource metadata): with no ``public_url``, a URL names the host
the agent used only when that host is allowed; otherwise a redirect is written as a path (as
nginx's ``proxy_redirect default`` writes it) and ``docs_url`` as a relative link.

Allowed, unless the route lists its own (``allowed_hosts``, ``allowed_origins``): the localhost
forms on any port, mend's listen address and ``public_url``'s host. Requests are checked when
the route lists hosts, when mend listens on a loopback address or when ``public_url`` is set;
listening on a wildcard address with neither, mend cannot know the names agents use, and (as
the SDKs do when bound to ``0.0.0.0``) does not check, warning at start-up for MCP routes.

Header values are untrusted: compared as lowercase strings, never parsed by a regex.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from yarl import URL

from proxy.config.choices import ProtocolName
from proxy.config.settings import parse_hostport
from proxy.edge.failures import HostNotAllowed, OriginNotAllowed

if TYPE_CHECKING:
    from aiohttp import web

    from proxy.policy.protocols.base import Call

#: The names of this machine's loopback interface, allowed on any port by default (the SDKs').
LOOPBACK = ("localhost", "127.0.0.1", "[::1]")
#: Listen addresses that are every interface: they name no host an agent uses.
WILDCARDS = frozenset({"", "0.0.0.0", "::", "[::]"})
_DEFAULT_PORTS = {"http": 80, "https": 443}
#: what a ``Host`` written into a URL may hold: a name or an address and a port, nothing else
_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]")


@dataclass(frozen=True, slots=True)
class Patterns:
    """``host``, ``host:port`` and ``host:*`` entries (an origin's ``scheme://`` included), and
    ``*``: anything. Parsed once, lowercase."""

    exact: frozenset[str]
    any_port: frozenset[str]
    anything: bool = False

    @classmethod
    def of(cls, entries: tuple[str, ...] | list[str]) -> Patterns:
        exact, any_port = set(), set()
        for entry in (e.strip().lower() for e in entries):
            if entry.endswith(":*"):
                any_port.add(entry[:-2])
            else:
                exact.add(entry)
        return cls(frozenset(exact), frozenset(any_port), "*" in exact)

    def match(self, value: str) -> bool:
        value = value.lower()
        if self.anything or value in self.exact:
            return True
        base, sep, port = value.rpartition(":")
        if sep and port.isdigit() and not base.endswith(":"):  # not the colons of a bare IPv6
            return base in self.any_port
        return value in self.any_port  # ``localhost:*`` allows ``localhost`` too


def authority(url: URL) -> list[str]:
    """How a URL's host may be written in ``Host``: ``host:port``, and ``host`` alone when the
    port is the scheme's default."""
    host = (url.raw_host or "").lower()
    if ":" in host:
        host = f"[{host}]"
    named = [f"{host}:{url.port}"]
    if url.port == _DEFAULT_PORTS.get(url.scheme):
        named.append(host)
    return named


@dataclass(frozen=True, slots=True)
class Hosts:
    """One route's allowed hosts and origins, and whether its MCP requests are checked."""

    hosts: Patterns
    origins: Patterns
    #: refuse MCP requests whose ``Host`` or ``Origin`` is not allowed
    checked: bool

    @classmethod
    def of(
        cls,
        listen: str,
        public_url: str | None,
        allowed_hosts: tuple[str, ...] | None = None,
        allowed_origins: tuple[str, ...] | None = None,
    ) -> Hosts:
        """A route's hosts: its own lists when it has them, else the defaults (module doc)."""
        listen_host = parse_hostport(listen)[0]
        listed = allowed_hosts is not None or allowed_origins is not None
        entries = allowed_hosts if allowed_hosts is not None else defaults(listen, public_url)
        hosts = Patterns.of(entries)
        if allowed_origins is None:
            schemes = _DEFAULT_PORTS
            origins = tuple(f"{scheme}://{entry}" for entry in entries for scheme in schemes)
            allowed_origins = ("*",) if hosts.anything else origins
        loopback = listen_host in ("localhost", "::1") or listen_host.startswith("127.")
        checked = listed or loopback or bool(public_url)
        return cls(hosts, Patterns.of(allowed_origins), checked)

    def refuses(self, host: str | None, origin: str | None) -> str | None:
        """Why a request with this ``Host`` and ``Origin`` is refused (``"host"``,
        ``"origin"``), or ``None``."""
        if not self.checked:
            return None
        if not host or not self.hosts.match(host):
            return "host"
        if origin is not None and not self.origins.match(origin.rstrip("/")):
            return "origin"
        return None

    def named(self, host: str | None) -> str | None:
        """``host`` when mend may write it into a URL (allowed, and a plain host and port even
        where ``*`` allows any), else ``None``."""
        if not host or not _HOST_CHARS.issuperset(host) or not self.hosts.match(host):
            return None
        return host


def defaults(listen: str, public_url: str | None) -> tuple[str, ...]:
    """The hosts allowed when a route lists none: the localhost forms on any port, mend's
    listen address (unless it is every interface) and ``public_url``'s host."""
    entries = [f"{name}:*" for name in LOOPBACK]
    host, port = parse_hostport(listen)
    if listen.rpartition(":")[0] not in WILDCARDS:
        entries.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    public = URL(public_url) if public_url else None
    if public is not None and public.host:
        entries += authority(public)
    return tuple(entries)


def speaks_mcp(request: web.BaseRequest, protocol: ProtocolName, call: Call | None) -> bool:
    """Whether a request is checked as MCP: every request of an ``mcp`` route; on an ``auto``
    route one whose headers name MCP, or a POST that accepts an event stream (streamable HTTP's
    ``Accept``, sent with every MCP request, ``initialize`` included)."""
    if protocol is ProtocolName.MCP:
        return True
    if protocol is not ProtocolName.AUTO:
        return False
    if call is not None and call.hint is not None and call.hint.name is ProtocolName.MCP:
        return True
    if request.method != "POST":  # a GET stream or DELETE names MCP in its headers (above)
        return False
    return "text/event-stream" in request.headers.get("Accept", "").lower()


def allowed(request: web.BaseRequest, hosts: Hosts) -> None:
    """Raise ``HostNotAllowed`` or ``OriginNotAllowed`` for a request the route refuses."""
    headers = request.headers
    why = hosts.refuses(headers.get("Host"), headers.get("Origin"))
    if why == "host":
        raise HostNotAllowed(f"Host {headers.get('Host', '')[:200]!r} is not allowed")
    if why == "origin":
        raise OriginNotAllowed(f"Origin {headers.get('Origin', '')[:200]!r} is not allowed")
