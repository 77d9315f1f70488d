"""The request target: forwarded as the agent sent it, never to another host or above the base.

The upstream's scheme, host and port come from the route's configuration only. The target is
appended to the route's base path byte for byte (percent-encoding, dot segments and all), as nginx
does with ``proxy_pass http://host`` and Envoy without ``normalize_path``; it is never parsed as a
URL reference, where ``//evil:1/x`` names a new authority (the open-proxy bug of 0.1).

One thing is decided before forwarding: whether the upstream, resolving dot segments the way
RFC 3986 §5.2.4 says (and many servers do, after decoding ``%2e`` and even ``%2f`` or ``\\``),
could end up above the route's root: ``/api/../admin`` on a route for ``/api``, ``/../../admin``
in front of ``http://h/api/v1``. Such a target is refused with ``INVALID_REQUEST_TARGET`` rather
than forwarded, normalised or guessed at; every other target goes as sent.
"""

from __future__ import annotations

from dataclasses import dataclass

from yarl import URL

from proxy.edge.failures import TargetRefused

#: Decoded forms that a lenient upstream may treat as a path separator or a dot.
_SEPARATORS = ("%2f", "%5c", "\\")
_DOT = "%2e"


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a route's requests go: parsed once from the route's ``upstream`` URL."""

    scheme: str
    host: str
    port: int | None
    base_path: str  # "" or "/api/v1": no trailing slash

    @classmethod
    def parse(cls, upstream: str) -> Origin:
        url = URL(upstream)
        host = url.raw_host or ""
        return cls(url.scheme, host, url.explicit_port, url.raw_path.rstrip("/"))

    def url(self, target: str) -> URL:
        """The upstream URL for an origin-form ``target`` (path and query, as sent)."""
        path, sep, query = target.partition("?")
        return URL.build(
            scheme=self.scheme,
            host=self.host,
            port=self.port,
            path=self.base_path + path,
            query_string=query if sep else "",
            encoded=True,
        )


def climbs_above_root(path: str) -> bool:
    """Whether dot segments in ``path`` (without query) could climb above its first ``/``.

    Conservative: ``%2e`` counts as a dot and ``%2f``, ``%5c``, ``\\`` as slashes (servers that
    decode before normalising exist), and an empty segment (``//``) does not count as a level,
    so ``/a//../..`` is refused although RFC 3986 would keep it below the root.
    """
    if "." not in path and "%" not in path:
        return False  # nearly every target: no dot segment possible
    lowered = path.lower()
    for separator in _SEPARATORS:
        lowered = lowered.replace(separator, "/")
    depth = 0
    for segment in lowered.replace(_DOT, ".").split("/"):
        if segment == "..":
            depth -= 1
            if depth < 0:
                return True
        elif segment not in ("", "."):
            depth += 1
    return False


def upstream_target(raw_target: str, prefix: str, strip_prefix: bool) -> str:
    """The part of ``raw_target`` to append to the route's base path; ``TargetRefused`` when it
    could leave the route (its prefix, or with ``strip_prefix`` the upstream's base path).

    ``raw_target`` is origin-form and has been matched to the route by its raw prefix.
    """
    root = prefix.rstrip("/")
    path = raw_target.partition("?")[0]
    if climbs_above_root(path[len(root) :] or "/"):
        raise TargetRefused("dot segments climb above the route's base path")
    if not (strip_prefix and root):
        return raw_target
    rest = raw_target[len(root) :]
    return rest if rest.startswith("/") else "/" + rest
