"""mend's own failures, and the one place aiohttp client errors are translated into them.

Like httpx's ``map_httpcore_exceptions``: the forwarder wraps the upstream call in
``upstream_errors()``, and everything above it deals in ``ProxyFailure`` only.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

import aiohttp


class ProxyFailure(Exception):
    """A request mend could not complete; ``rule`` names its envelope in own_errors.yaml."""

    rule = "proxy.upstream_protocol_error"
    reason = "protocol_error"  # label of mend_upstream_failures_total
    status = 502
    upstream = True  # the upstream failed us, as opposed to a request mend refuses itself

    def __init__(self, detail: str, **context: Any) -> None:
        super().__init__(detail)
        self.context = context


class UpstreamUnreachable(ProxyFailure):
    rule, reason, status = "proxy.upstream_unreachable", "unreachable", 502


class UpstreamTimeout(ProxyFailure):
    rule, reason, status = "proxy.upstream_timeout", "timeout", 504


class UpstreamProtocolError(ProxyFailure):
    rule, reason, status = "proxy.upstream_protocol_error", "protocol_error", 502


class UpstreamResponseTooLarge(ProxyFailure):
    rule, reason, status = "proxy.upstream_response_too_large", "too_large", 502


class RequestTooLarge(ProxyFailure):
    rule, reason, status = "proxy.request_too_large", "request_too_large", 413
    upstream = False


class ForwardProxyRefused(ProxyFailure):
    rule, reason, status = "proxy.forward_proxy_refused", "refused", 400
    upstream = False


class TargetRefused(ProxyFailure):
    """A request target whose dot segments could leave the route's base path."""

    rule, reason, status = "proxy.invalid_request_target", "bad_target", 400
    upstream = False


class RequestTimeout(ProxyFailure):
    """The agent paused longer than the body timeout while sending its request body."""

    rule, reason, status = "proxy.request_timeout", "request_timeout", 408
    upstream = False


class TooManyConnections(ProxyFailure):
    rule, reason, status = "proxy.too_many_connections", "too_many_connections", 503
    upstream = False


class MalformedRequest(ProxyFailure):
    """A request aiohttp's parser refused; ``status`` is 400, 414 or 431."""

    rule, reason, status = "proxy.malformed_request", "malformed_request", 400
    upstream = False


class UriTooLong(MalformedRequest):
    rule, reason, status = "proxy.uri_too_long", "uri_too_long", 414


class HeadersTooLarge(MalformedRequest):
    rule, reason, status = "proxy.headers_too_large", "headers_too_large", 431


class RouteNotFound(ProxyFailure):
    rule, reason, status = "proxy.route_not_found", "no_route", 404
    upstream = False


class ProxyBug(ProxyFailure):
    """mend itself failed; the agent still gets an envelope, the operator a traceback."""

    rule, reason, status = "proxy.internal_error", "mend_bug", 500
    upstream = False


def _own_cause(exc: BaseException) -> ProxyFailure | None:
    cause = exc.__cause__
    for _ in range(3):
        if cause is None or isinstance(cause, ProxyFailure):
            return cause
        cause = cause.__cause__
    return None


class upstream_errors:  # lower case: used as ``with upstream_errors():``, like a function
    """Translate what aiohttp raises while talking to the upstream (subclasses first).

    A class, not ``@contextmanager``: it wraps every upstream call, and a generator-based
    context manager costs several times more to enter and leave.
    """

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, _: TracebackType | None
    ) -> None:
        if exc is None or isinstance(exc, ProxyFailure):
            return
        if (own := _own_cause(exc)) is not None:
            # mend failed inside aiohttp (the request body's reader: too large, too slow; the
            # response head's guard), which wrapped what it caught
            raise own from exc
        if isinstance(exc, TimeoutError):  # aiohttp's connect and read timeouts included
            raise UpstreamTimeout(type(exc).__name__) from exc
        if isinstance(exc, aiohttp.ClientConnectorError):
            raise UpstreamUnreachable(str(exc.os_error) or type(exc).__name__) from exc
        if isinstance(exc, (aiohttp.ClientError, OSError, ValueError)):
            # ServerDisconnectedError, ClientPayloadError, a malformed status line or header...
            raise UpstreamProtocolError(type(exc).__name__) from exc
