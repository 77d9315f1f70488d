"""aiohttp's client errors become mend's own failures, once, at the upstream boundary."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey

from proxy.failures import (
    ProxyFailure,
    RequestTooLarge,
    UpstreamProtocolError,
    UpstreamTimeout,
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
