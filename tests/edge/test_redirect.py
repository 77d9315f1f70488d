"""Redirect headers naming the upstream are rewritten to name mend (``proxy/edge/redirect.py``)."""

from __future__ import annotations

import pytest
from aiohttp import web

from proxy.edge.redirect import UpstreamOrigin, rewrite
from tests.conftest import StartMend, StartUpstream

UP = UpstreamOrigin.of("http://Upstream.internal:8000/api")
AGENT = "https://mend.example/svc"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("http://upstream.internal:8000/api/get", "https://mend.example/svc/get"),
        ("HTTP://UPSTREAM.INTERNAL:8000/api/a?b=1#c", "https://mend.example/svc/a?b=1#c"),
        ("http://upstream.internal:8000/api", "https://mend.example/svc/"),
        ("http://upstream.internal:8000/apix/get", "http://upstream.internal:8000/apix/get"),
        ("http://upstream.internal:8000/other", "http://upstream.internal:8000/other"),
        ("http://upstream.internal:9000/api/get", "http://upstream.internal:9000/api/get"),
        ("https://upstream.internal:8000/api/get", "https://upstream.internal:8000/api/get"),
        ("http://elsewhere.example/api/get", "http://elsewhere.example/api/get"),
        ("/api/get", "/api/get"),
        ("get", "get"),
    ],
)
def test_location_naming_the_upstream_names_mend(value: str, expected: str) -> None:
    """Only a URL under the upstream's origin and base path is rewritten, prefix included."""
    assert rewrite("Location", value, UP, AGENT) == expected


def test_default_port_written_either_way() -> None:
    """``http://h`` and ``http://h:80`` are the same origin."""
    origin = UpstreamOrigin.of("http://h")
    assert rewrite("Location", "http://h:80/x", origin, "http://m") == "http://m/x"
    assert rewrite("Location", "http://h/x", origin, "http://m") == "http://m/x"


def test_refresh_url_is_rewritten_quotes_kept() -> None:
    """``Refresh: 5; url='http://upstream/...'`` keeps its delay and quotes."""
    value = "5; url='http://upstream.internal:8000/api/next'"
    assert rewrite("Refresh", value, UP, AGENT) == "5; url='https://mend.example/svc/next'"
    assert rewrite("Refresh", "5", UP, AGENT) == "5"


async def _redirect(request: web.Request) -> web.Response:
    own = f"http://{request.host}"  # the upstream's own origin, as frameworks build it
    return web.Response(
        status=302,
        headers={"Location": f"{own}/get", "Content-Location": f"{own}/here"},
    )


async def test_absolute_redirect_names_the_host_the_agent_used(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A 302 whose Location names the upstream reaches the agent naming mend's host, one the
    route allows."""
    upstream = await start_upstream({"/r": _redirect})
    mend = await start_mend(upstream, route={"allowed_hosts": ["mend.test:81"]})
    resp = await mend.client.get("/r", allow_redirects=False, headers={"Host": "mend.test:81"})
    assert resp.status == 302
    assert resp.headers["Location"] == "http://mend.test:81/get"
    assert resp.headers["Content-Location"] == "http://mend.test:81/here"


async def test_a_host_not_allowed_gets_a_path(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A ``Host`` the route does not allow is never written into a URL (Host-header poisoning):
    the redirect names the path alone, which the agent resolves against the URL it used."""
    mend = await start_mend(await start_upstream({"/r": _redirect}))
    resp = await mend.client.get("/r", allow_redirects=False, headers={"Host": "evil.example"})
    assert resp.status == 302
    assert resp.headers["Location"] == "/get"
    assert resp.headers["Content-Location"] == "/here"


async def test_forwarded_origin_and_prefix(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """Behind another proxy, ``X-Forwarded-Proto``/``-Host`` name the origin (a host the route
    allows); a stripped prefix is put back."""
    route = {"prefix": "/svc/", "strip_prefix": True, "allowed_hosts": ["api.example"]}
    mend = await start_mend(await start_upstream({"/r": _redirect}), route=route)
    headers = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "api.example"}
    resp = await mend.client.get("/svc/r", allow_redirects=False, headers=headers)
    assert resp.headers["Location"] == "https://api.example/svc/get"


async def test_public_url_wins(start_upstream: StartUpstream, start_mend: StartMend) -> None:
    """``public_url`` names mend in redirects, as in docs_url."""
    mend = await start_mend(
        await start_upstream({"/r": _redirect}), public_url="https://public.example/base/"
    )
    resp = await mend.client.get("/r", allow_redirects=False)
    assert resp.headers["Location"] == "https://public.example/base/get"


async def test_rewrite_redirects_false_passes_them_unchanged(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A route's ``rewrite_redirects: false`` leaves Location as the upstream sent it."""
    upstream = await start_upstream({"/r": _redirect})
    mend = await start_mend(upstream, route={"rewrite_redirects": False})
    resp = await mend.client.get("/r", allow_redirects=False)
    assert resp.headers["Location"] == f"http://{upstream.host}:{upstream.port}/get"
