"""The upstream client's errors become mend's own failures, once, at the upstream boundary."""

from __future__ import annotations

import ssl

import pytest

from proxy.edge.failures import (
    ProxyFailure,
    RequestTimeout,
    RequestTooLarge,
    UpstreamProtocolError,
    UpstreamTimeout,
    UpstreamTLSError,
    UpstreamUnreachable,
    upstream_errors,
)
from proxy.edge.upstream import (
    ConnectError,
    ConnectTimeout,
    Disconnected,
    ProtocolError,
    ReadTimeout,
    RequestBodyFailed,
    UpstreamError,
)


def _from(error: UpstreamError, cause: BaseException) -> UpstreamError:
    """``error`` as the client raises it: caused by what the transport or the body raised."""
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (TimeoutError(), UpstreamTimeout),
        (ReadTimeout("read"), UpstreamTimeout),
        (ConnectTimeout("connect"), UpstreamTimeout),
        (
            _from(ConnectError("refused"), ConnectionRefusedError(111, "refused")),
            UpstreamUnreachable,
        ),
        (Disconnected("closed before the response head"), UpstreamProtocolError),
        (ProtocolError("malformed response: bad chunk"), UpstreamProtocolError),
        (ConnectionResetError(104, "reset"), UpstreamProtocolError),
        (ValueError("bad header"), UpstreamProtocolError),
    ],
)
def test_client_errors_are_translated(raised: Exception, expected: type[ProxyFailure]) -> None:
    """Each family maps to its failure, chained to the original for the operator's log."""
    with pytest.raises(expected) as caught, upstream_errors():
        raise raised
    assert caught.value.__cause__ is raised


@pytest.mark.parametrize(
    ("raised", "applied"),
    [
        (ConnectTimeout("connect"), "no"),
        (ConnectError("refused"), "no"),
        (ReadTimeout("read"), "unknown"),
        (Disconnected("reset"), "unknown"),
        (ProtocolError("garbage"), "unknown"),
    ],
)
def test_applied_says_whether_the_request_went_out(raised: Exception, applied: str) -> None:
    """No connection: nothing was sent (``applied: no``); past it, ``unknown``."""
    with pytest.raises(ProxyFailure) as caught, upstream_errors():
        raise raised
    assert caught.value.applied == applied


def test_a_request_body_that_fails_mid_send_is_mends_failure_applied_unknown() -> None:
    """mend's own failure while the body was being sent (the agent too slow) keeps its rule,
    and ``applied`` becomes unknown: part of the request was on its way."""
    own = RequestTimeout("agent paused")
    with pytest.raises(RequestTimeout) as caught, upstream_errors():
        raise _from(RequestBodyFailed("agent paused"), own)
    assert caught.value is own
    assert own.applied == "unknown"


def test_mends_own_failures_pass_unchanged() -> None:
    """A ProxyFailure raised inside (a body over the cap) is not re-labelled."""
    failure = RequestTooLarge("too big", limit=1)
    with pytest.raises(RequestTooLarge) as caught, upstream_errors():
        raise failure
    assert caught.value is failure


def test_other_exceptions_are_bugs_not_upstream_failures() -> None:
    """A KeyError is mend's bug: it propagates as itself, to be reported as PROXY_INTERNAL_ERROR."""
    with pytest.raises(KeyError), upstream_errors():
        raise KeyError("x")


def test_nothing_raised_nothing_changed() -> None:
    """The happy path returns normally."""
    with upstream_errors():
        value = 1
    assert value == 1


def _verify_error(code: int, message: str) -> ssl.SSLCertVerificationError:
    error = ssl.SSLCertVerificationError(1, f"certificate verify failed: {message}")
    error.verify_code, error.verify_message = code, message
    return error


def _ssl_error(reason: str, kind: type[ssl.SSLError] = ssl.SSLError) -> ssl.SSLError:
    error = kind(1, f"[SSL: {reason}] {reason.lower()}")
    error.reason = reason
    return error


@pytest.mark.parametrize(
    ("raised", "detail"),
    [
        (
            _from(ConnectError("verify"), _verify_error(10, "certificate has expired")),
            "upstream certificate expired: certificate has expired",
        ),
        (
            _from(
                ConnectError("verify"),
                _verify_error(20, "unable to get local issuer certificate"),
            ),
            "upstream certificate unknown CA: unable to get local issuer certificate",
        ),
        (
            _from(
                ConnectError("verify"),
                _verify_error(62, "Hostname mismatch, certificate is not valid for 'api'."),
            ),
            "upstream certificate name mismatch: Hostname mismatch",
        ),
        (
            _from(ConnectError("handshake"), _ssl_error("SSLV3_ALERT_HANDSHAKE_FAILURE")),
            "TLS handshake failed: handshake refused by the upstream",
        ),
        (
            _from(ConnectError("handshake"), _ssl_error("WRONG_VERSION_NUMBER")),
            "does not speak TLS on this port",
        ),
        (_ssl_error("TLSV13_ALERT_CERTIFICATE_REQUIRED"), "client certificate required"),
    ],
)
def test_tls_errors_are_upstream_tls_errors(raised: Exception, detail: str) -> None:
    """Certificate and handshake errors become UPSTREAM_TLS_ERROR (not the connector's generic
    UPSTREAM_UNREACHABLE), the reason in the detail the operator's log line shows."""
    with pytest.raises(UpstreamTLSError) as caught, upstream_errors():
        raise raised
    assert detail in str(caught.value)
    assert caught.value.rule == "proxy.upstream_tls_error"


def test_tls_alert_after_the_handshake_is_an_upstream_tls_error() -> None:
    """TLS 1.3: a client certificate the upstream requires is refused after mend's side of the
    handshake, on the first read: the client's ``Disconnected`` is caused by the ``SSLError``."""
    alert = _ssl_error("TLSV13_ALERT_CERTIFICATE_REQUIRED")
    with pytest.raises(UpstreamTLSError, match="client certificate required"), upstream_errors():
        raise Disconnected("closed before the response head") from alert


def test_tls_connection_closed_is_not_a_certificate_problem() -> None:
    """A TLS connection the upstream just closes (EOF in the handshake) may be a restart: it
    stays UPSTREAM_UNREACHABLE, as a TCP reset would be."""
    eof = _ssl_error("UNEXPECTED_EOF_WHILE_READING", ssl.SSLEOFError)
    with pytest.raises(UpstreamUnreachable), upstream_errors():
        raise ConnectError(str(eof)) from eof
