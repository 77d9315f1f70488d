"""Protected-resource metadata (RFC 9728) naming the resource as the client reached it.

An MCP server behind OAuth publishes a JSON document at
``/.well-known/oauth-protected-resource`` (or with the resource's path after it, or at any URL a
``WWW-Authenticate`` challenge's ``resource_metadata`` names) whose ``resource`` is the URL its
tokens are for. The MCP SDKs compare it with the URL they connected to and stop when the two
differ. Behind mend the document names the upstream's own address, so a ``resource`` on the
upstream's origin is rewritten to mend's, as ``Location`` is (``proxy/edge/redirect.py``); every
other member (``authorization_servers`` above all: the authorization server lives elsewhere)
passes untouched.

Which answers are such documents is known from the request: a GET of a well-known path, or of a
path that a challenge this route answered named (``NamedPaths``, bounded, per process). Only a
JSON object of at most ``MAX_BYTES`` is rewritten; anything else passes as it came.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import orjson

from proxy.edge.redirect import UpstreamOrigin

#: RFC 9728 §3: the well-known suffix, alone (a resource at the root) or before the path
WELL_KNOWN = "/.well-known/oauth-protected-resource"
#: the largest document read and rewritten (real ones are a few hundred bytes)
MAX_BYTES = 64 << 10
#: the most paths remembered per route from challenges (oldest out)
MAX_NAMED = 64


@dataclass(slots=True)
class NamedPaths:
    """The paths challenges named in ``resource_metadata``, as the agent will request them."""

    limit: int = MAX_NAMED
    #: oldest first (read directly on every GET: no method call when it is empty)
    paths: OrderedDict[str, None] = field(default_factory=OrderedDict)

    def remember(self, path: str) -> None:
        self.paths[path] = None
        self.paths.move_to_end(path)
        while len(self.paths) > self.limit:
            self.paths.popitem(last=False)


def requested(method: str, path: str, named: NamedPaths) -> bool:
    """Whether a request (its raw path, no query) asks for protected-resource metadata: the
    well-known path, also below a route's prefix, or one a challenge named."""
    if method != "GET":
        return False
    at = path.find(WELL_KNOWN)
    if at != -1:
        end = at + len(WELL_KNOWN)
        return path[end : end + 1] in ("", "/")
    return bool(named.paths) and path in named.paths


def rewritten(raw: bytes, origin: UpstreamOrigin, agent_base: str) -> bytes | None:
    """The document with its ``resource`` naming mend, or ``None`` when there is nothing to
    rewrite (not a JSON object, no ``resource`` on the upstream's origin, too large)."""
    if len(raw) > MAX_BYTES:
        return None
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    resource = document.get("resource") if isinstance(document, dict) else None
    if not isinstance(resource, str):
        return None
    named = origin.agent_url(resource, agent_base)
    if named is None:
        return None
    if "/" not in resource.partition("://")[2]:  # the origin alone: so the rewritten one too
        named = named.removesuffix("/")
    document["resource"] = named
    return orjson.dumps(document)
