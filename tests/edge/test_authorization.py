"""MCP authorization through mend (docs/contract.md §3, §6): protected-resource metadata and
challenges
name mend, ``WWW-Authenticate`` passes intact, and MCP requests are refused for a ``Host`` or
``Origin`` the route does not allow (``proxy/edge/hosts.py``, ``resource_metadata.py``)."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.conftest import Mend, StartMend, StartUpstream

TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZ2VudCJ9.c2lnbmF0dXJlLW9mLXRoZS10b2tlbg"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}},
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def _origin(server: TestServer) -> str:
    return f"http://{server.host}:{server.port}"


class Resource:
    """An MCP server behind OAuth: its metadata, its challenge, and the requests it saw."""

    def __init__(self, challenge: str = "") -> None:
        self.challenge = challenge
        self.seen: list[str] = []
        self.resource = ""

    def routes(self) -> dict[str, Any]:
        return {
            "GET /.well-known/oauth-protected-resource/mcp": self.metadata,
            "GET /.well-known/oauth-protected-resource": self.metadata_root,
            "GET /custom/meta.json": self.metadata,
            "POST /mcp": self.mcp,
            "GET /login": self.login,
        }

    async def metadata(self, request: web.Request) -> web.Response:
        self.resource = self.resource or f"http://{request.host}/mcp"
        document = {
            "resource": self.resource,
            "authorization_servers": [f"http://{request.host}/as"],
            "scopes_supported": ["mcp:basic", "mcp:write"],
        }
        return web.json_response(document)

    async def metadata_root(self, request: web.Request) -> web.Response:
        return web.json_response({"resource": f"http://{request.host}", "x": [1, {"y": None}]})

    async def mcp(self, request: web.Request) -> web.Response:
        self.seen.append(request.headers.get("Host", ""))
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            challenge = self.challenge.replace("{origin}", f"http://{request.host}")
            body = {"error": "invalid_token", "error_description": "Missing or bad token"}
            return web.json_response(body, status=401, headers={"WWW-Authenticate": challenge})
        return web.json_response({"jsonrpc": "2.0", "id": 1, "result": {"ok": True}})

    async def login(self, request: web.Request) -> web.Response:
        return web.Response(status=302, headers={"Location": f"http://{request.host}/next"})


async def _serve(
    start_upstream: StartUpstream, start_mend: StartMend, resource: Resource, **settings: Any
) -> tuple[TestServer, Mend]:
    upstream = await start_upstream(resource.routes())
    mend = await start_mend(upstream, **settings)
    return upstream, mend


def _mend_origin(mend: Mend) -> str:
    return f"http://127.0.0.1:{mend.client.port}"


async def test_path_suffixed_metadata_names_mend_as_the_resource(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """``/.well-known/oauth-protected-resource/mcp`` through mend: ``resource`` is the URL the
    client reached, the authorization server and every other member as the upstream sent."""
    resource = Resource()
    upstream, mend = await _serve(start_upstream, start_mend, resource)
    resp = await mend.client.get("/.well-known/oauth-protected-resource/mcp")
    assert resp.status == 200, mend.log.getvalue()
    document = await resp.json()
    assert document["resource"] == f"{_mend_origin(mend)}/mcp"
    assert document["authorization_servers"] == [f"{_origin(upstream)}/as"]
    assert document["scopes_supported"] == ["mcp:basic", "mcp:write"]
    assert int(resp.headers["Content-Length"]) == len(await resp.read())


async def test_root_metadata_names_the_origin_alone(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A ``resource`` that is an origin alone stays an origin alone (no trailing slash)."""
    _, mend = await _serve(start_upstream, start_mend, Resource())
    document = await (await mend.client.get("/.well-known/oauth-protected-resource")).json()
    assert document == {"resource": _mend_origin(mend), "x": [1, {"y": None}]}


async def test_a_resource_elsewhere_passes_byte_for_byte(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A ``resource`` naming another origin (the upstream already names its public URL) is
    not touched: the body arrives as the upstream wrote it."""
    resource = Resource()
    resource.resource = "https://public.example/mcp"
    upstream, mend = await _serve(start_upstream, start_mend, resource)
    direct = await (await mend.client.session.get(f"{_origin(upstream)}/custom/meta.json")).read()
    through = await (await mend.client.get("/.well-known/oauth-protected-resource/mcp")).read()
    assert through == direct


async def test_public_url_names_the_resource(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """With ``public_url`` (a sidecar behind an ingress) the resource is named by it."""
    _, mend = await _serve(
        start_upstream, start_mend, Resource(), public_url="https://mcp.example.com/"
    )
    resp = await mend.client.get(
        "/.well-known/oauth-protected-resource/mcp", headers={"Host": "pod-1:8080"}
    )
    assert (await resp.json())["resource"] == "https://mcp.example.com/mcp"


async def test_a_host_not_allowed_is_never_the_resource(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """With no ``public_url``, a ``Host`` the route does not allow is not written into the
    metadata (Host-header poisoning): the document passes as the upstream sent it."""
    upstream, mend = await _serve(start_upstream, start_mend, Resource())
    resp = await mend.client.get(
        "/.well-known/oauth-protected-resource/mcp", headers={"Host": "evil.example.com"}
    )
    assert (await resp.json())["resource"] == f"{_origin(upstream)}/mcp"


async def test_challenge_passes_intact_with_its_metadata_url_naming_mend(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A 401's challenge reaches the client byte for byte (its scope, error, description),
    only its ``resource_metadata`` URL naming mend; the document it names, on a path no
    well-known rule covers, then names mend as the resource too."""
    challenge = (
        'Bearer error="invalid_token", error_description="Missing or bad token", '
        'resource_metadata="{origin}/custom/meta.json", scope="mcp:basic mcp:write"'
    )
    _, mend = await _serve(start_upstream, start_mend, Resource(challenge))
    resp = await mend.client.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS)
    assert resp.status == 401
    expected = challenge.replace("{origin}", _mend_origin(mend))
    assert resp.headers.getall("WWW-Authenticate") == [expected]
    document = await (await mend.client.get("/custom/meta.json")).json()
    assert document["resource"] == f"{_mend_origin(mend)}/mcp"


async def test_challenge_parameters_are_not_redacted(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """Parameters that look like internals or secrets to the redactor are the client's to
    read: a realm with an internal host, a nonce, a long opaque value pass as sent."""
    challenge = (
        'Bearer realm="https://auth.internal.corp:8443/realms/prod", '
        'error="insufficient_scope", scope="files:read files:write", '
        'nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093", opaque="5ccc069c403ebaf9f0171e9517f40e41"'
    )
    _, mend = await _serve(start_upstream, start_mend, Resource(challenge))
    resp = await mend.client.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS)
    assert resp.headers["WWW-Authenticate"] == challenge


async def test_a_passed_through_challenge_names_mend_too(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """On an ``http`` route no rule rewrites, the 401 passes as it came, its challenge's
    metadata URL still naming mend."""
    challenge = 'Bearer resource_metadata="{origin}/.well-known/oauth-protected-resource/mcp"'
    upstream = await start_upstream(Resource(challenge).routes())
    mend = await start_mend(upstream, route={"protocol": "http"}, default_packs=False)
    resp = await mend.client.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS)
    assert resp.status == 401
    assert resp.headers["WWW-Authenticate"] == challenge.replace("{origin}", _mend_origin(mend))


async def test_a_token_is_not_logged(start_upstream: StartUpstream, start_mend: StartMend) -> None:
    """Authorization traffic is logged and counted like the rest, never with its token."""
    resource = Resource('Bearer error="invalid_token"')
    _, mend = await _serve(start_upstream, start_mend, resource)
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {TOKEN}x"}
    assert (await mend.client.post("/mcp", json=INITIALIZE, headers=headers)).status == 401
    headers["Authorization"] = f"Bearer {TOKEN}"
    assert (await mend.client.post("/mcp", json=INITIALIZE, headers=headers)).status == 200
    lines = mend.log_lines()
    assert [line["status"] for line in lines if line.get("path") == "/mcp"] == [401, 200]
    assert TOKEN not in mend.log.getvalue()


async def _initialize(mend: Mend, **headers: str) -> tuple[int, dict[str, Any]]:
    resp = await mend.client.post("/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **headers})
    return resp.status, json.loads(await resp.read() or b"{}")


async def test_an_mcp_request_for_another_host_is_refused(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """DNS rebinding: an ``initialize`` naming ``evil.example.com`` in ``Host`` and ``Origin``
    is refused with 403 as the SDKs refuse it, in JSON-RPC, and never reaches the upstream."""
    resource = Resource()
    _, mend = await _serve(start_upstream, start_mend, resource)
    status, body = await _initialize(
        mend, Host="evil.example.com", Origin="http://evil.example.com"
    )
    assert status == 403
    assert body["id"] == 1
    assert body["error"]["data"]["code"] == "HOST_NOT_ALLOWED"
    assert "evil.example.com" not in body["error"]["data"]["docs_url"]
    assert resource.seen == []


async def test_an_mcp_request_from_another_origin_is_refused(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A page elsewhere (``Origin``) is refused even when the ``Host`` is allowed."""
    resource = Resource()
    _, mend = await _serve(start_upstream, start_mend, resource)
    status, body = await _initialize(mend, Origin="https://evil.example.com")
    assert status == 403
    assert body["error"]["data"]["code"] == "ORIGIN_NOT_ALLOWED"
    assert resource.seen == []


async def test_localhost_forms_are_allowed(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """``localhost``, ``127.0.0.1`` and ``[::1]`` on any port, and their origins, pass."""
    resource = Resource()
    _, mend = await _serve(start_upstream, start_mend, resource)
    for host in ("localhost:3000", "127.0.0.1", "[::1]:8080"):
        status, _ = await _initialize(mend, Host=host, Origin="http://localhost:5173")
        assert status == 401, host  # the upstream's own answer: it was reached
    assert len(resource.seen) == 3


async def test_a_rest_request_is_not_checked(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """On an ``auto`` route a request that is not MCP keeps today's behaviour: any Host."""
    _, mend = await _serve(start_upstream, start_mend, Resource())
    resp = await mend.client.get("/login", allow_redirects=False, headers={"Host": "api.corp"})
    assert resp.status == 302
    assert resp.headers["Location"] == "/next"  # a host not allowed: written as a path


async def test_a_route_lists_its_hosts_and_origins(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """``allowed_hosts`` / ``allowed_origins`` replace the defaults (localhost included)."""
    resource = Resource()
    route = {"allowed_hosts": ["mcp.example.com"], "allowed_origins": ["https://app.example"]}
    upstream = await start_upstream(resource.routes())
    mend = await start_mend(upstream, route=route)
    assert (await _initialize(mend, Host="mcp.example.com"))[0] == 401
    ok = await _initialize(mend, Host="mcp.example.com", Origin="https://app.example")
    assert ok[0] == 401
    assert (await _initialize(mend))[0] == 403  # 127.0.0.1:<port> is not listed
    refused = await _initialize(mend, Host="mcp.example.com", Origin="http://localhost:1")
    assert refused[1]["error"]["data"]["code"] == "ORIGIN_NOT_ALLOWED"
    assert len(resource.seen) == 2


async def test_listening_everywhere_without_names_checks_nothing(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """On ``0.0.0.0`` with neither ``public_url`` nor ``allowed_hosts``, mend cannot know the
    names agents use: as the SDKs bound to ``0.0.0.0``, it does not check (and warns)."""
    resource = Resource()
    upstream = await start_upstream(resource.routes())
    mend = await start_mend(upstream, route={"protocol": "mcp"}, listen="0.0.0.0:8080")
    assert (await _initialize(mend, Host="pod-1.svc:8080"))[0] == 401
    warned = [line for line in mend.log_lines() if line.get("event") == "mcp_hosts_unchecked"]
    assert warned
    assert warned[0]["route"] == "default"


async def test_docs_url_names_an_allowed_host_only(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """An envelope's ``docs_url`` names the host the agent used when it is allowed, and is a
    relative link otherwise, never the attacker's host."""
    _, mend = await _serve(start_upstream, start_mend, Resource())
    resp = await mend.client.get("/nothing-here", headers={"Host": "evil.example.com"})
    assert (await resp.json())["error"]["docs_url"].startswith("/_mend/errors/")
    resp = await mend.client.get("/nothing-here", headers={"Host": "localhost:9999"})
    assert (await resp.json())["error"]["docs_url"].startswith("http://localhost:9999/_mend/")


async def _token_error(request: web.Request) -> web.Response:
    body = {"error": "invalid_grant", "error_description": "The refresh token expired"}
    return web.json_response(body, status=400, headers={"Cache-Control": "no-store"})


async def _registration_error(request: web.Request) -> web.Response:
    return web.json_response({"error": "invalid_redirect_uri"}, status=400)


async def test_a_token_endpoint_error_reaches_the_oauth_client_as_sent(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """An authorization server behind the same route: its token endpoint's error (a form
    request) and its registration endpoint's error pass byte for byte, for the OAuth client
    that branches on ``error`` (``invalid_grant``: sign in again)."""
    upstream = await start_upstream(
        {"POST /token": _token_error, "POST /register": _registration_error}
    )
    mend = await start_mend(upstream)
    form = {"grant_type": "refresh_token", "refresh_token": "r1"}
    direct = await mend.client.session.post(f"{_origin(upstream)}/token", data=form)
    through = await mend.client.post("/token", data=form)
    assert through.status == 400
    assert await through.read() == await direct.read()
    registered = await mend.client.post("/register", json={"redirect_uris": ["x"]})
    assert await registered.json() == {"error": "invalid_redirect_uri"}


async def test_a_resource_servers_json_error_is_still_an_envelope(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """The same ``invalid_grant`` body answering a JSON API request is the agent's to read:
    an envelope, as before."""
    upstream = await start_upstream({"POST /token": _token_error})
    mend = await start_mend(upstream)
    resp = await mend.client.post("/token", json={"grant_type": "refresh_token"})
    assert (await resp.json())["error"]["code"] == "TOKEN_EXPIRED"


async def test_any_host_allowed_still_writes_only_a_plain_host(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """With ``allowed_hosts: ["*"]`` a ``Host`` that is not a plain host and port is never
    written into a URL: the redirect is a path."""
    upstream = await start_upstream(Resource().routes())
    mend = await start_mend(upstream, route={"allowed_hosts": ["*"]})
    odd = await mend.client.get("/login", allow_redirects=False, headers={"Host": "a.b@evil/x"})
    assert odd.headers["Location"] == "/next"
    plain = await mend.client.get("/login", allow_redirects=False, headers={"Host": "api.corp"})
    assert plain.headers["Location"] == "http://api.corp/next"
