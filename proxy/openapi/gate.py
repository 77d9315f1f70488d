"""The proxy's one collaborator for OpenAPI: it checks a request before it is forwarded
(``validate_requests``) and adds what the document knows to an envelope (``enrich``).

Both read the document in force from the rule store, so a reload swaps documents with the rules.
A checked request's body is read (up to ``MAX_CHECKED_BODY`` bytes, and never past the request
body limit) through the proxy's own body reader, and what was read is forwarded as it came: the
upstream receives the agent's bytes, not a re-serialisation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from proxy.envelope import Envelope
from proxy.exchange import NOT_JSON
from proxy.openapi.enrich import Request, enrich
from proxy.openapi.refusal import RequestInvalid
from proxy.openapi.spec import Mount, Spec
from proxy.openapi.validate import Violation
from proxy.settings import Route

#: Bytes of a request body read to check it; a longer body goes unchecked (its parameters are
#: still checked), never refused for its length here.
MAX_CHECKED_BODY = 1 << 20
_VIOLATIONS: web.RequestKey[list[Violation]] = web.RequestKey("mend.violations", list)


class OpenAPIGate:
    def __init__(self, specs: Callable[[], dict[str, Spec]], body_limit: int | None) -> None:
        self._specs = specs  # the engine in force's documents, by route name
        self._mounts: dict[str, Mount] = {}
        self.body_cap = min(MAX_CHECKED_BODY, body_limit or MAX_CHECKED_BODY)

    def _mount(self, route: Route) -> Mount:
        mount = self._mounts.get(route.name)
        if mount is None:
            mount = self._mounts[route.name] = Mount.of(route)
        return mount

    async def check(
        self, request: web.BaseRequest, route: Route, body: AsyncIterator[bytes] | None
    ) -> AsyncIterator[bytes] | None:
        """The body to forward (what was read, then the rest) for a route that validates; the
        request goes on unread when the route does not, or the document lacks its operation.
        ``RequestInvalid`` with every violation otherwise."""
        spec = self._specs().get(route.name) if route.validate_requests else None
        if spec is None:
            return body
        located = spec.locate(request.method, request.rel_url.raw_path, self._mount(route))
        if located is None or located.match is None or located.match.operation is None:
            return body  # an undocumented operation: the upstream answers, and enrich explains
        head: list[bytes] = []
        complete = body is None
        if body is not None:
            size = 0
            async for chunk in body:
                head.append(chunk)
                size += len(chunk)
                if size > self.body_cap:
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
        if violations:
            request[_VIOLATIONS] = violations
            raise RequestInvalid(violations)
        return None if body is None else _replay(head, body, complete)

    def enrich(
        self,
        request: web.BaseRequest,
        route: Route | None,
        envelope: Envelope,
        response_json: Any = None,
        request_json: Any = NOT_JSON,
    ) -> Envelope:
        """The envelope with what the route's document knows; as it was without a document."""
        spec = self._specs().get(route.name) if route is not None else None
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


async def _replay(
    head: list[bytes], rest: AsyncIterator[bytes], complete: bool
) -> AsyncIterator[bytes]:
    for chunk in head:
        yield chunk
    if not complete:
        async for chunk in rest:
            yield chunk
