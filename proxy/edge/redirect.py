"""Redirect headers that name the upstream, rewritten to name mend (docs/contract.md §3).

nginx's ``proxy_redirect default``: a ``Location`` (also ``Content-Location`` and the URL of a
``Refresh``) that starts with the route's upstream origin and base path is rewritten to the origin
the agent used and the route's prefix, so an agent following it stays behind mend instead of
learning the upstream's address and going around it. Relative values, and absolute ones naming
anything else, pass unchanged. A route's ``rewrite_redirects: false`` turns it off.

A ``WWW-Authenticate`` challenge's ``resource_metadata`` URL (RFC 9728 §5.1) is rewritten the
same way, every other byte of the challenge kept: an MCP client fetches that document next, and
must fetch it from mend (``proxy/edge/resource_metadata.py``).

With no ``public_url`` and a ``Host`` the route does not allow (``proxy/edge/hosts.py``), the
agent's origin is not known: a redirect is written as a path, and a challenge's URL, which must
be absolute, is left as it came.

Header values are untrusted: they are read with string methods only, and a value that does not
have the plain ``scheme://authority/path`` shape passes as it came.
"""

from __future__ import annotations

from dataclasses import dataclass

from multidict import istr
from yarl import URL

#: The response headers whose URL is rewritten (``istr``: a look-up in a response's headers
#: skips folding the name's case, on every passed-through response)
HEADERS = (istr("Location"), istr("Content-Location"), istr("Refresh"), istr("WWW-Authenticate"))


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
    lower = name.lower()
    if lower == "www-authenticate":  # its URLs are absolute: none is written from a path
        return challenge(value, origin, agent_base)[0] if "://" in agent_base else value
    if lower != "refresh":
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


#: the challenge parameter naming the protected-resource metadata (RFC 9728 §5.1)
_METADATA_PARAM = "resource_metadata="


def challenge(value: str, origin: UpstreamOrigin, agent_base: str) -> tuple[str, list[str]]:
    """A ``WWW-Authenticate`` value with each ``resource_metadata`` URL that names the upstream
    rewritten to name mend (``agent_base`` absolute), every other byte as it came; and the
    rewritten URLs, for the metadata they name (``proxy/edge/resource_metadata.py``)."""
    lower, out, named, at = value.lower(), [], [], 0
    while (found := lower.find(_METADATA_PARAM, at)) != -1:
        start = found + len(_METADATA_PARAM)
        if found and lower[found - 1] not in " ,\t":  # the tail of another parameter's name
            out.append(value[at:start])
            at = start
            continue
        quoted = value[start : start + 1] == '"'
        begin = start + quoted
        end = value.find('"', begin) if quoted else _token_end(value, begin)
        if end == -1:  # an unterminated quoted string: the rest passes as it came
            break
        url = value[begin:end]
        rewritten = origin.agent_url(url, agent_base)
        out.append(value[at:begin])
        if rewritten is None:
            out.append(url)
        else:
            out.append(rewritten)
            named.append(rewritten)
        at = end
    out.append(value[at:])
    return "".join(out), named


def _token_end(value: str, begin: int) -> int:
    """Where an unquoted parameter value that starts at ``begin`` ends."""
    ends = [e for e in (value.find(mark, begin) for mark in (",", " ", "\t")) if e != -1]
    return min(ends, default=len(value))
