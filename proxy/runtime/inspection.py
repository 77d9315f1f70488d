"""What a response needs from mend: passed as it streams, read whole, or rewritten event by
event. Decided from its status, its content type and the call the agent made; the rules say
which statuses they inspect (``RuleSet.inspects``), the agent's protocol which successes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from proxy.config.choices import ProtocolName
from proxy.edge import relay, resource_metadata
from proxy.policy.exchange import NOT_JSON
from proxy.policy.protocols.base import Call, Inspection
from proxy.policy.protocols.detect import Detector
from proxy.policy.protocols.graphql import RESPONSE_TYPE as GRAPHQL_RESPONSE
from proxy.policy.rules.ruleset import RuleSet

if TYPE_CHECKING:
    from proxy.runtime.flow import Flow


def classify(flow: Flow, ruleset: RuleSet, detector: Detector) -> Inspection:
    """Stream a response, read it, or rewrite its events; the call whose protocol said so is
    made here when only the response names its protocol (a GraphQL answer)."""
    upstream, request, call = flow.upstream, flow.request, flow.call
    assert upstream is not None
    status = upstream.status
    if status >= 400:
        return Inspection.DOCUMENT if ruleset.inspects(status) else Inspection.NONE
    content_type = upstream.content_type
    if 200 <= status < 300 and status != 204 and request.method != "HEAD":
        if metadata_requested(flow):
            return Inspection.DOCUMENT  # its ``resource`` names mend (resource_metadata.py)
        route = flow.route
        assert route is not None
        if (
            call is None
            and content_type == GRAPHQL_RESPONSE
            and route.protocol is not ProtocolName.HTTP
        ):
            call = flow.call = bare_call(detector, request)
        protocol = detector.for_response(call, content_type, NOT_JSON) if call else None
        if call is not None and protocol is not None:
            wanted = protocol.inspects(call, content_type)
            if wanted is not Inspection.NONE:
                return wanted
    if ruleset.inspects(status) and not relay.is_stream(upstream):
        return Inspection.DOCUMENT
    return Inspection.NONE


def metadata_requested(flow: Flow) -> bool:
    """Whether the request asks for protected-resource metadata whose ``resource`` mend may
    rewrite (a route that rewrites redirects)."""
    runtime = flow.runtime
    if runtime is None or runtime.redirects is None:
        return False
    return resource_metadata.requested(
        flow.request.method, flow.request.rel_url.raw_path, runtime.metadata
    )


def metadata_document(flow: Flow, raw: bytes) -> bytes | None:
    """Protected-resource metadata naming mend as the resource, when the request asked for it
    and its ``resource`` names the upstream (``proxy/edge/resource_metadata.py``)."""
    runtime = flow.runtime
    if runtime is None or runtime.redirects is None or not metadata_requested(flow):
        return None
    base = flow.agent_base()
    if "://" not in base:  # no origin known to name: as it came
        return None
    return resource_metadata.rewritten(raw, runtime.redirects, base)


def bare_call(detector: Detector, request: web.BaseRequest) -> Call:
    """A call for a request nothing marked, for a response that names its own protocol."""
    return detector.make(
        method=request.method,
        query_string=request.query_string,
        accept=request.headers.get("Accept", ""),
    )
