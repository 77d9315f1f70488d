"""One route's OpenAPI document, loaded and compiled: what the proxy holds per route.

``locate`` maps the path an agent sent to the document's paths (through the route's prefix, the
upstream's base path and the document's ``servers`` base path) and back again (``agent_path``),
so every template an envelope names is one the agent can send to mend as is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from yarl import URL

from proxy.config.route import Route
from proxy.policy.openapi.document import Document, load_document
from proxy.policy.openapi.operations import Operations, PathMatch, read_operations
from proxy.policy.openapi.validate import Checker


@dataclass(frozen=True, slots=True)
class Mount:
    """Where a route puts the upstream: its prefix (stripped or not) and the upstream's base."""

    prefix: str
    strip_prefix: bool
    upstream_base: str  # "" or "/api": no trailing slash

    @classmethod
    def of(cls, route: Route) -> Mount:
        return cls(route.prefix, route.strip_prefix, URL(route.upstream).raw_path.rstrip("/"))

    @property
    def agent_root(self) -> str:
        root = self.prefix.rstrip("/")
        return root if self.strip_prefix else ""

    def upstream_path(self, agent_path: str) -> str:
        root = self.agent_root
        rest = agent_path[len(root) :] if root and agent_path.startswith(root) else agent_path
        return self.upstream_base + (rest if rest.startswith("/") else "/" + rest)


@dataclass(frozen=True, slots=True)
class Located:
    spec_path: str
    match: PathMatch | None


@dataclass(frozen=True, slots=True)
class Spec:
    source: Path
    document: Document
    operations: Operations
    checker: Checker
    #: each operation's example request parts, built on its first envelope
    #: (proxy/policy/openapi/enrich)
    examples: dict[tuple[str, str], Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def load(cls, path: Path, thorough: bool = False) -> Spec:
        """``RuleError`` (``file:line`` problems) when the document is not a valid one;
        ``thorough``: every schema and operation checked too (``mend check --openapi``)."""
        document = load_document(path, thorough)
        operations = read_operations(document)
        return cls(path, document, operations, Checker(document, operations))

    def locate(self, method: str, agent_path: str, mount: Mount) -> Located | None:
        """The document path and operation for a request; ``None``: outside the document."""
        spec_path = self.operations.spec_path(mount.upstream_path(agent_path))
        if spec_path is None:
            return None
        return Located(spec_path, self.operations.find(method, spec_path))

    def agent_path(self, template: str, mount: Mount) -> str:
        """The path an agent sends to mend for a document path (a template or a concrete one)."""
        upstream = self.operations.base_path + template
        base = mount.upstream_base
        rest = upstream[len(base) :] if base and upstream.startswith(base) else upstream
        return (mount.agent_root + rest) or "/"
