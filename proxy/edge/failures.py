"""mend's own failures, and the one place upstream client errors are translated into them.

Like httpx's ``map_httpcore_exceptions``: the forwarder wraps the upstream call in
``upstream_errors()``, and everything above it deals in ``ProxyFailure`` only. The client
(``proxy/edge/upstream``) raises one family, ``UpstreamError``.
"""

from __future__ import annotations

import ssl
from types import TracebackType
from typing import Any

from proxy.edge.upstream.errors import (
    ConnectError,
    ConnectTimeout,
    RequestBodyFailed,
    UpstreamError,
)
from proxy.policy.envelope.model import Applied


class ProxyFailure(Exception):
    """A request mend could not complete; ``rule`` names its envelope in own_errors.yaml."""

    rule = "proxy.upstream_protocol_error"
    reason = "protocol_error"  # label of mend_upstream_failures_total
    status = 502
    upstream = True  # the upstream failed us, as opposed to a request mend refuses itself
    #: whether the request may have taken effect upstream (docs/contract.md §1): "unknown" once it
    #: was
    #: sent (a timeout, a reset, garbage back), "no" when mend never sent it (refused, connect
    #: or TLS failure, a request mend refuses itself); ``None``: the upstream answered
    applied: Applied | None = "unknown"

    def __init__(self, detail: str, **context: Any) -> None:
        super().__init__(detail)
        self.context = context


class Refused(ProxyFailure):
    """A request mend answers itself, never sending it upstream (docs/contract.md §1 ``applied:
    "no"``)."""

    upstream = False
    applied: Applied | None = "no"


class UpstreamUnreachable(ProxyFailure):
    rule, reason, status = "proxy.upstream_unreachable", "unreachable", 502
    applied = "no"  # no connection: nothing was sent


class UpstreamTimeout(ProxyFailure):
    rule, reason, status = "proxy.upstream_timeout", "timeout", 504


class CircuitOpen(Refused):
    """The route's circuit is open (``proxy/policy/crosscall/circuit.py``): answered at once, the
    upstream untouched; ``wait_ms`` is the time left."""

    rule, reason, status = "proxy.upstream_unavailable", "circuit_open", 503


class UpstreamProtocolError(ProxyFailure):
    rule, reason, status = "proxy.upstream_protocol_error", "protocol_error", 502


class UpstreamTLSError(ProxyFailure):
    """No trusted TLS connection to the upstream: a certificate mend rejects, or a handshake the
    upstream refuses. Not transient: the same request fails the same way until someone fixes a
    certificate or the configuration. The detail (the reason, for the operator's log) comes from
    ``tls_failure``; the certificate itself never reaches the agent."""

    rule, reason, status = "proxy.upstream_tls_error", "tls_error", 502
    applied = "no"  # no trusted connection: the upstream never read the request


class UpstreamResponseTooLarge(ProxyFailure):
    rule, reason, status = "proxy.upstream_response_too_large", "too_large", 502
    applied = None  # the upstream answered (too much)


class RequestTooLarge(Refused):
    rule, reason, status = "proxy.request_too_large", "request_too_large", 413
    # refused before it was sent (see ``upstream_errors`` for a body cut)


class ForwardProxyRefused(Refused):
    rule, reason, status = "proxy.forward_proxy_refused", "refused", 400


class TargetRefused(Refused):
    """A request target whose dot segments could leave the route's base path."""

    rule, reason, status = "proxy.invalid_request_target", "bad_target", 400


class RequestTimeout(Refused):
    """The agent paused longer than the body timeout while sending its request body."""

    rule, reason, status = "proxy.request_timeout", "request_timeout", 408
    # refused before it was sent (see ``upstream_errors`` for a body cut)


class TooManyConnections(Refused):
    rule, reason, status = "proxy.too_many_connections", "too_many_connections", 503


class MalformedRequest(Refused):
    """A request aiohttp's parser refused; ``status`` is 400, 414 or 431."""

    rule, reason, status = "proxy.malformed_request", "malformed_request", 400


class UnsupportedTransferCoding(MalformedRequest):
    """A ``Transfer-Encoding`` with a coding besides ``chunked``: refused, never rewritten
    (nginx's 501; ``proxy/edge/server/framing.py``)."""

    rule, reason, status = "proxy.unsupported_transfer_coding", "unsupported_coding", 501


class UriTooLong(MalformedRequest):
    rule, reason, status = "proxy.uri_too_long", "uri_too_long", 414


class HeadersTooLarge(MalformedRequest):
    rule, reason, status = "proxy.headers_too_large", "headers_too_large", 431


class RouteNotFound(Refused):
    rule, reason, status = "proxy.route_not_found", "no_route", 404


class HostNotAllowed(Refused):
    """An MCP request for a ``Host`` the route does not allow (``proxy/edge/hosts.py``): refused
    before it is sent, as the MCP SDKs refuse one (DNS-rebinding protection)."""

    rule, reason, status = "proxy.host_not_allowed", "host_not_allowed", 403


class OriginNotAllowed(HostNotAllowed):
    """An MCP request from an ``Origin`` the route does not allow (a web page elsewhere)."""

    rule, reason = "proxy.origin_not_allowed", "origin_not_allowed"


class ProxyBug(ProxyFailure):
    """mend itself failed; the agent still gets an envelope, the operator a traceback."""

    rule, reason, status = "proxy.internal_error", "mend_bug", 500
    upstream = False
    applied = None  # mend cannot say where it failed


#: OpenSSL's verify codes (``X509_V_ERR_*``) by the kind of problem an operator looks for.
_VERIFY_KINDS = {
    2: "unknown CA",  # unable to get issuer certificate
    9: "not yet valid",
    10: "expired",
    18: "unknown CA",  # self-signed certificate
    19: "unknown CA",  # self-signed certificate in certificate chain
    20: "unknown CA",  # unable to get local issuer certificate
    21: "unknown CA",  # unable to verify the first certificate
    23: "revoked",
    62: "name mismatch",  # hostname mismatch
    64: "name mismatch",  # IP address mismatch
}

#: OpenSSL's reasons for a refused handshake, as an operator would say them.
_HANDSHAKE_REASONS = {
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": "client certificate required by the upstream",
    "SSLV3_ALERT_BAD_CERTIFICATE": "client certificate rejected by the upstream",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": "client certificate expired, says the upstream",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN": "client certificate rejected by the upstream",
    "TLSV1_ALERT_UNKNOWN_CA": "client certificate's CA unknown to the upstream",
    "SSLV3_ALERT_HANDSHAKE_FAILURE": "handshake refused by the upstream (no common cipher, "
    "or a client certificate it requires)",
    "TLSV1_ALERT_PROTOCOL_VERSION": "no TLS version in common with the upstream",
    "UNSUPPORTED_PROTOCOL": "no TLS version in common with the upstream",
    "WRONG_VERSION_NUMBER": "the upstream does not speak TLS on this port (http:// upstream?)",
    "TLSV1_UNRECOGNIZED_NAME": "server name unknown to the upstream",
}


def tls_failure(error: ssl.SSLError) -> UpstreamTLSError:
    """The failure for a TLS error, its detail the reason in an operator's words (expired,
    unknown CA, name mismatch, client certificate required...) and OpenSSL's own."""
    if isinstance(error, ssl.SSLCertVerificationError):
        kind = _VERIFY_KINDS.get(error.verify_code, "rejected")
        return UpstreamTLSError(f"upstream certificate {kind}: {error.verify_message or error}")
    reason = getattr(error, "reason", None)  # set by OpenSSL's errors only
    said = _HANDSHAKE_REASONS.get(reason or "")
    if said is not None:
        return UpstreamTLSError(f"TLS handshake failed: {said} ({reason})")
    return UpstreamTLSError(f"TLS failed: {reason or error}")


def _tls_error(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error behind what the client raised, if one is: a handshake or certificate error
    is the cause of its ``ConnectError``; an alert the upstream sends after the handshake (TLS
    1.3: a client certificate it requires) arrives while reading, the cause of a
    ``Disconnected``.

    A TLS connection the upstream just closes (``SSLEOFError``, ``SSLZeroReturnError``) is not
    one: like a TCP reset, it may be a restart, and stays unreachable or a protocol error.
    """
    for error in (exc, exc.__cause__):
        if isinstance(error, ssl.SSLError) and not isinstance(
            error, ssl.SSLEOFError | ssl.SSLZeroReturnError
        ):
            return error
    return None


def _own_cause(exc: BaseException) -> ProxyFailure | None:
    cause = exc.__cause__
    for _ in range(3):
        if cause is None or isinstance(cause, ProxyFailure):
            return cause
        cause = cause.__cause__
    return None


def translated(exc: BaseException) -> ProxyFailure | None:
    """The failure the upstream client's ``exc`` is (``None``: not the client's: a bug)."""
    if isinstance(exc, RequestBodyFailed) and (own := _own_cause(exc)) is not None:
        # mend failed while sending the request body (too large, too slow): the request
        # was on its way
        if own.applied == "no":
            own.applied = "unknown"
        return own
    if isinstance(exc, TimeoutError):  # the client's connect and read timeouts included
        timeout = UpstreamTimeout(str(exc) or type(exc).__name__)
        if isinstance(exc, ConnectTimeout):
            timeout.applied = "no"  # no connection in time: nothing was sent
        return timeout
    if isinstance(exc, UpstreamError | OSError) and (tls := _tls_error(exc)) is not None:
        # before the generic connect error: a certificate is not a host that is down
        return tls_failure(tls)
    if isinstance(exc, ConnectError):
        return UpstreamUnreachable(str(exc) or type(exc).__name__)
    if isinstance(exc, (UpstreamError, OSError, ValueError)):
        # Disconnected, ProtocolError (a malformed status line or header, a head too large)
        return UpstreamProtocolError(str(exc) or type(exc).__name__)
    return None


class upstream_errors:  # lower case: used as ``with upstream_errors():``, like a function
    """Translate what the upstream client raises while talking to the upstream (``translated``).

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
        if isinstance(exc, RequestBodyFailed) and isinstance(exc.__cause__, ConnectionResetError):
            raise exc.__cause__  # the agent hung up mid-body: its 499, not the upstream's 502
        if (failure := translated(exc)) is not None:
            raise failure from exc
