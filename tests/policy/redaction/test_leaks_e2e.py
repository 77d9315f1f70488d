"""Leaks end to end: every corpus body, served by a real upstream, through a real mend.

The upstream serves each body of tests/corpus/leaks with its status and content type, plus
response headers that leak the way real servers do. Whatever rule pack matches, no planted
marker may come out of mend, in any rendering, in the body or in any header; and no secret
marker may reach the operator's log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from tests.conftest import StartMend, StartUpstream

CORPUS = Path(__file__).parents[2] / "corpus" / "leaks"
MANIFEST: dict[str, dict[str, Any]] = yaml.safe_load(
    (CORPUS / "manifest.yaml").read_text(encoding="utf-8")
)
ACCEPTS = ("application/json", "application/problem+json", "text/plain", "application/xml")

# Headers real upstreams send on errors, each carrying its own marker.
LEAKING_HEADERS = {
    "Server": "Apache-Tomcat/9.0.1 (zqxhdra)",
    "X-Powered-By": "PHP/8.1.2-zqxhdrb",
    "X-AspNet-Version": "4.0.30319-zqxhdrc",
    "X-Debug-Token": "zqxhdrd",
    "X-Backend-Server": "app-zqxhdre.internal",
    "Via": "1.1 varnish-zqxhdrf",
    "X-Upstream-Addr": "10.0.9.9:8080-zqxhdrg",
    "X-Runtime": "0.31-zqxhdrh",
    "X-Application-Context": "orders-zqxhdri:prod:8080",
}
HEADER_MARKERS = [f"zqxhdr{c}" for c in "abcdefghi"]
#: a challenge is the client's to read, byte for byte (docs/contract.md §3), internal host included
CHALLENGE = (
    'Bearer realm="api", error="invalid_token", error_uri="http://auth-zqxhdrj.internal/docs"'
)


def _leaked(markers: list[str], text: str) -> list[str]:
    lowered = text.lower()
    return [marker for marker in markers if marker.lower() in lowered]


@pytest.mark.parametrize("name", sorted(MANIFEST))
async def test_no_marker_of_a_leaking_body_reaches_the_agent(
    start_upstream: StartUpstream, start_mend: StartMend, name: str
) -> None:
    """Body, status and content type of a leaking upstream: no marker in any rendering."""
    entry = MANIFEST[name]
    body = (CORPUS / name).read_bytes()
    status = int(entry["status"])

    async def leak(_: web.Request) -> web.Response:
        headers = {**LEAKING_HEADERS, "WWW-Authenticate": CHALLENGE}
        response = web.Response(body=body, status=status, headers=headers)
        response.headers["Content-Type"] = entry["content_type"]
        return response

    # A 200 body is only an error on routes that ask for it (GraphQL errors ride on 200).
    route = {"success_rules": ["*"]} if status < 400 else None
    mend = await start_mend(
        await start_upstream({"/api/orders/42": leak}),
        route=route,
        public_url="https://errors.example.com",
    )
    markers = entry["markers"] + entry.get("secrets", []) + HEADER_MARKERS
    for accept in ACCEPTS:
        resp = await mend.client.get("/api/orders/42", headers={"Accept": accept})
        text = await resp.text()
        if status < 400 and "X-Error-Code" not in resp.headers:
            # no rule called this success an error: it streams through untouched (docs/contract.md
            # §3)
            assert text.encode() == body
            continue
        headers = "\n".join(f"{k}: {v}" for k, v in resp.headers.items())
        assert "X-Error-Code" in resp.headers, accept
        assert _leaked(markers, text) == [], (accept, text)
        assert _leaked(markers, headers) == [], (accept, headers)
        assert resp.headers.getall("WWW-Authenticate") == [CHALLENGE], accept
    # the operator's log keeps the upstream body for debugging, but never its secrets
    if status >= 400:
        assert any(line.get("upstream_body") for line in mend.log_lines())
    assert _leaked(entry.get("secrets", []), mend.log.getvalue()) == []
