"""Redirect headers that name the upstream, rewritten to name mend (CONTRACT §3).

nginx's ``proxy_redirect default``: a ``Location`` (also ``Content-Location`` and the URL of a
``Refresh``) that starts with the route's upstream origin and base path is rewritten to the origin
the agent used and the route's prefix, so an agent following it stays behind mend instead of
learning the upstream's address and going around it. Relative values, and absolute ones naming
anything else, pass unchanged. A route's ``rewrite_redirects: false`` turns it off.

Header values are untrusted: they are read with string methods only, and a value that does not
have the plain ``scheme://authority/path`` shape passes as it came.
"""

from __future__ import annotations

from dataclasses import dataclass

from multidict import istr
from yarl import URL

#: The response headers whose URL is rewritten (``istr``: a look-up in a response's headers
#: skips folding the name's case, on every passed-through response)
HEADERS = (istr("Location"), istr("Content-Location"), istr("Refresh"))


@dataclass(frozen=True, slots=True)
class UpstreamOrigin:
    """How a route's upstream is named in the URLs it sends: parsed once per route."""

    scheme: str
    #: ``host:port`` as it may be written, lower case (``host`` alone too for a default port)
    authorities: frozenset[str]
    base_path: str  # "" or "/api": no trailing slash

    @classmethod
    def of(cls, upstream: str) -> UpstreamOrigin:
        url = URL(upstream)
        host = (url.raw_host or "").lower()
        if ":" in host:  # IPv6
            host = f"[{host}]"
        authorities = {f"{host}:{url.port}"}
        if url.is_default_port():
            authorities.add(host)
        return cls(url.scheme.lower(), frozenset(authorities), url.raw_path.rstrip("/"))

    def agent_url(self, value: str, agent_base: str) -> str | None:
        """``value`` with this origin and base path replaced by ``agent_base`` (the agent's
        origin and the route's prefix, no trailing slash); ``None`` if it names neither."""
        scheme, sep, rest = value.partition("://")
        if not sep or scheme.lower() != self.scheme:
            return None
        end = len(rest)
        for mark in "/?#":
            found = rest.find(mark)
            if found != -1 and found < end:
                end = found
        if rest[:end].lower() not in self.authorities:
            return None
        tail = rest[end:]
        base = self.base_path
        if base:
            if not (tail == base or tail.startswith((base + "/", base + "?", base + "#"))):
                return None  # outside the route's upstream base: no agent path names it
            tail = tail[len(base) :]
        if not tail.startswith("/"):
            tail = "/" + tail
        return agent_base + tail


def rewrite(name: str, value: str, origin: UpstreamOrigin, agent_base: str) -> str:
    """One redirect header's value, rewritten when it names the upstream."""
    if name.lower() != "refresh":
        return origin.agent_url(value.strip(), agent_base) or value
    # Refresh: "5; url=http://upstream/next" (the URL possibly quoted)
    at = value.lower().find("url=")
    if at == -1:
        return value
    target = value[at + 4 :].strip()
    quote = target[:1] if target[:1] in ("'", '"') else ""
    inner = target[1:].removesuffix(quote) if quote else target
    found = origin.agent_url(inner, agent_base)
    if found is None:
        return value
    return f"{value[: at + 4]}{quote}{found}{quote}"
