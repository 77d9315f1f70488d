"""The proxy's one collaborator for OpenAPI: it checks a request before it is forwarded
(``validate_requests``) and adds what the document knows to an envelope (``enrich``).

Both read the document of the configuration the request runs on (``proxy/runtime/generation.py``),
so a
reload swaps documents with the rules and a request in flight keeps the one it started with.
A checked request's body is read (up to ``MAX_CHECKED_BODY`` bytes, and never past the request
body limit) through the proxy's own body reader, and what was read is forwarded as it came: the
upstream receives the agent's bytes, not a re-serialisation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from proxy.config.route import Route
from proxy.edge.openapi_refusal import RequestInvalid
from proxy.policy.envelope.model import Envelope
from proxy.policy.exchange import NOT_JSON
from proxy.policy.openapi.agent_request import Request
from proxy.policy.openapi.check_first import checked_first
from proxy.policy.openapi.enrich import enrich
from proxy.policy.openapi.spec import Mount, Spec
from proxy.policy.openapi.violations import Violation
from proxy.policy.protocols.base import replayed
from proxy.policy.rules.ruleengine import Loaded

#: Bytes of a request body read to check it; a longer body goes unchecked (its parameters are
#: still checked), never refused for its length here.
MAX_CHECKED_BODY = 1 << 20
_VIOLATIONS: web.RequestKey[list[Violation]] = web.RequestKey("mend.violations", list)
#: violations found before the request was made (an MCP tool's arguments that HTTP cannot
#: carry, ``proxy/edge/mcptools``); their presence has the request checked whatever the route says
PRESET: web.RequestKey[list[Violation]] = web.RequestKey("mend.preset_violations", list)


#: Mounts kept (one per route shape seen, reloads included) before the cache starts over.
_MOUNTS_MAX = 256


class OpenAPIGate:
    def __init__(self, loaded: Callable[[web.BaseRequest], Loaded]) -> None:
        self._loaded = loaded  # the configuration the request runs on
        self._mounts: dict[tuple[str, bool, str], Mount] = {}

    def _specs(self, request: web.BaseRequest) -> dict[str, Spec]:
        return self._loaded(request).engine.specs

    def _mount(self, route: Route) -> Mount:
        key = (route.prefix, route.strip_prefix, route.upstream)
        mount = self._mounts.get(key)
        if mount is None:
            if len(self._mounts) >= _MOUNTS_MAX:
                self._mounts.clear()
            mount = self._mounts[key] = Mount.of(route)
        return mount

    async def check(
        self, request: web.BaseRequest, route: Route, body: AsyncIterator[bytes] | None
    ) -> AsyncIterator[bytes] | None:
        """The body to forward (what was read, then the rest) for a route that validates; the
        request goes on unread when the route does not, or the document lacks its operation.
        ``RequestInvalid`` with every violation otherwise."""
        preset = request.get(PRESET) if request.transport is None else None  # in process only
        checked = route.validate_requests or preset is not None
        spec = self._specs(request).get(route.name) if checked else None
        if spec is None:
            return body
        limit = self._loaded(request).settings.request_body_max_bytes
        cap = min(MAX_CHECKED_BODY, limit or MAX_CHECKED_BODY)
        located = spec.locate(request.method, request.rel_url.raw_path, self._mount(route))
        if located is None or located.match is None or located.match.operation is None:
            if preset:
                request[_VIOLATIONS] = preset
                raise RequestInvalid(preset)
            return body  # an undocumented operation: the upstream answers, and enrich explains
        head: list[bytes] = []
        complete = body is None
        if body is not None:
            size = 0
            async for chunk in body:
                head.append(chunk)
                size += len(chunk)
                if size > cap:
                    break
            else:
                complete = True
        encoded = request.headers.get("Content-Encoding", "identity").lower() != "identity"
        raw = b"".join(head) if complete and not encoded else None
        violations = spec.checker.check(
            located.match,
            request.query,
            request.headers,
            request.headers.get("Content-Type", ""),
            raw,
        )
        if preset:
            known = {(v.pointer, v.location) for v in preset}
            violations = preset + [v for v in violations if (v.pointer, v.location) not in known]
        if violations:
            request[_VIOLATIONS] = violations
            raise RequestInvalid(violations)
        return None if body is None else replayed(head, body, complete)

    def template(self, request: web.BaseRequest, route: Route) -> str | None:
        """The documented path template of the request's operation, as the agent writes it
        (what a circuit covers, ``proxy/policy/crosscall/operation.py``); ``None`` without a
        document
        or outside it."""
        spec = self._specs(request).get(route.name)
        if spec is None:
            return None
        mount = self._mount(route)
        located = spec.locate(request.method, request.rel_url.raw_path, mount)
        if located is None or located.match is None or located.match.operation is None:
            return None
        return spec.agent_path(located.match.operation.path, mount)

    def enrich(
        self,
        request: web.BaseRequest,
        route: Route | None,
        envelope: Envelope,
        response_json: Any = None,
        request_json: Any = NOT_JSON,
    ) -> Envelope:
        """The envelope with what the route's document knows; as it was without a document."""
        spec = self._specs(request).get(route.name) if route is not None else None
        if spec is None or route is None:
            return envelope
        facts = Request(
            method=request.method,
            path=request.rel_url.raw_path,
            query=request.query,
            headers=request.headers,
            response_json=response_json,
            request_json=request_json,
        )
        return enrich(envelope, spec, self._mount(route), facts, request.get(_VIOLATIONS))

    def check_first(
        self, request: web.BaseRequest, route: Route | None, envelope: Envelope
    ) -> Envelope:
        """A write that may have taken effect, with the document's operation to check it by."""
        spec = self._specs(request).get(route.name) if route is not None else None
        if spec is None or route is None:
            return envelope
        mount = self._mount(route)
        return checked_first(envelope, spec, mount, request.method, request.rel_url.raw_path)
