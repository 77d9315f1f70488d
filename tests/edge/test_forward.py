"""Forwarded headers: hop-by-hop ones dropped both ways, the proxy's own added upstream."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from proxy.edge.forward import end_to_end, upstream_request_headers


def proxy_of(*pairs: tuple[str, str]) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict(pairs))


@pytest.mark.parametrize(
    ("given", "drop", "kept"),
    [
        (
            [("Content-Type", "application/json"), ("Connection", "keep-alive")],
            (),
            [("Content-Type", "application/json")],
        ),
        (
            # every RFC 9110 §7.6.1 field, any case, goes; the end-to-end ones stay
            [
                ("keep-alive", "timeout=5"),
                ("TE", "trailers"),
                ("Trailer", "X-Checksum"),
                ("Transfer-Encoding", "chunked"),
                ("Upgrade", "h2c"),
                ("Proxy-Authorization", "Basic eA=="),
                ("Proxy-Authenticate", "Basic"),
                ("Proxy-Connection", "keep-alive"),
                ("Accept", "*/*"),
            ],
            (),
            [("Accept", "*/*")],
        ),
        (
            # headers the Connection header names are this hop's only, with odd spacing
            [
                ("Connection", "close, X-Hop ,,x-other"),
                ("X-Hop", "1"),
                ("X-Other", "2"),
                ("X-Kept", "3"),
            ],
            (),
            [("X-Kept", "3")],
        ),
        (
            # repeated headers keep their order and every value
            [("Set-Cookie", "a=1"), ("Set-Cookie", "b=2"), ("Host", "x")],
            ("host",),
            [("Set-Cookie", "a=1"), ("Set-Cookie", "b=2")],
        ),
    ],
)
def test_end_to_end(
    given: list[tuple[str, str]], drop: tuple[str, ...], kept: list[tuple[str, str]]
) -> None:
    """Only end-to-end headers, less ``drop``, come out, in their original order."""
    assert list(end_to_end(proxy_of(*given), drop).items()) == kept


def test_end_to_end_leaves_its_input_alone() -> None:
    """The agent's own headers are not modified by filtering a copy of them."""
    given = CIMultiDict([("Connection", "x-a"), ("X-A", "1")])
    end_to_end(CIMultiDictProxy(given))
    assert list(given.items()) == [("Connection", "x-a"), ("X-A", "1")]


@pytest.mark.parametrize(
    ("prior", "expected"),
    [(None, "10.0.0.7"), ("203.0.113.9", "203.0.113.9, 10.0.0.7")],
)
def test_forwarded_for_appends_the_client(prior: str | None, expected: str) -> None:
    """X-Forwarded-For gains the client address; the Host becomes the upstream's."""
    pairs = [("Host", "mend.local"), ("Connection", "keep-alive")]
    if prior:
        pairs.append(("X-Forwarded-For", prior))
    out = upstream_request_headers(
        proxy_of(*pairs),
        request_id="req_1",
        client_ip="10.0.0.7",
        scheme="http",
        host="mend.local",
        upstream_host="api:8080",
        preserve_host=False,
    )
    assert out["X-Forwarded-For"] == expected
    assert out["Host"] == "api:8080"
    assert out["X-Forwarded-Host"] == "mend.local"
    assert out["X-Request-ID"] == "req_1"
    assert "Connection" not in out
