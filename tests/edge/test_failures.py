"""aiohttp's client errors become mend's own failures, once, at the upstream boundary."""

from __future__ import annotations

import ssl

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey

from proxy.edge.failures import (
    ProxyFailure,
    RequestTooLarge,
    UpstreamProtocolError,
    UpstreamTimeout,
    UpstreamTLSError,
    UpstreamUnreachable,
    upstream_errors,
)

KEY = ConnectionKey("api", 80, False, True, None, None, None)


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (TimeoutError(), UpstreamTimeout),
        (aiohttp.ServerTimeoutError("read"), UpstreamTimeout),
        (aiohttp.ConnectionTimeoutError("connect"), UpstreamTimeout),
        (
            aiohttp.ClientConnectorError(KEY, ConnectionRefusedError(111, "refused")),
            UpstreamUnreachable,
        ),
        (aiohttp.ServerDisconnectedError(), UpstreamProtocolError),
        (aiohttp.ClientPayloadError("bad chunk"), UpstreamProtocolError),
        (ConnectionResetError(104, "reset"), UpstreamProtocolError),
        (ValueError("bad header"), UpstreamProtocolError),
    ],
)
def test_client_errors_are_translated(raised: Exception, expected: type[ProxyFailure]) -> None:
    """Each family maps to its failure, chained to the original for the operator's log."""
    with pytest.raises(expected) as caught, upstream_errors():
        raise raised
    assert caught.value.__cause__ is raised


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
            aiohttp.ClientConnectorCertificateError(
                KEY, _verify_error(10, "certificate has expired")
            ),
            "upstream certificate expired: certificate has expired",
        ),
        (
            aiohttp.ClientConnectorCertificateError(
                KEY, _verify_error(20, "unable to get local issuer certificate")
            ),
            "upstream certificate unknown CA: unable to get local issuer certificate",
        ),
        (
            aiohttp.ClientConnectorCertificateError(
                KEY, _verify_error(62, "Hostname mismatch, certificate is not valid for 'api'.")
            ),
            "upstream certificate name mismatch: Hostname mismatch",
        ),
        (
            aiohttp.ClientConnectorSSLError(KEY, _ssl_error("SSLV3_ALERT_HANDSHAKE_FAILURE")),
            "TLS handshake failed: handshake refused by the upstream",
        ),
        (
            aiohttp.ClientConnectorSSLError(KEY, _ssl_error("WRONG_VERSION_NUMBER")),
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
    handshake, on the first read: aiohttp raises ``ClientOSError`` caused by the ``SSLError``."""
    alert = _ssl_error("TLSV13_ALERT_CERTIFICATE_REQUIRED")
    with pytest.raises(UpstreamTLSError, match="client certificate required"), upstream_errors():
        raise aiohttp.ClientOSError(*alert.args) from alert


def test_tls_connection_closed_is_not_a_certificate_problem() -> None:
    """A TLS connection the upstream just closes (EOF in the handshake) may be a restart: it
    stays UPSTREAM_UNREACHABLE, as a TCP reset would be."""
    eof = _ssl_error("UNEXPECTED_EOF_WHILE_READING", ssl.SSLEOFError)
    with pytest.raises(UpstreamUnreachable), upstream_errors():
        raise aiohttp.ClientConnectorSSLError(KEY, eof)
