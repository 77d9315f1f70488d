"""The error catalog on the agent port: every code documented, JSON or HTML, after reloads too."""

from __future__ import annotations

import html
import io
import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from prometheus_client import CollectorRegistry

from proxy.config.route import Route
from proxy.config.settings import Settings
from proxy.edge.catalog import wants_html
from proxy.observation.logs import make_logger
from proxy.policy.envelope.shared_codes import load_codes
from proxy.policy.rules.ruleengine import Engine, RuleStore
from proxy.runtime.admin import create_admin_app
from proxy.runtime.app import create_app
from tests.conftest import MendTestServer, StartMend, StartUpstream

ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]
HOSTILE = "<script>alert('x')</script> & \"quotes\""
HOSTILE_YAML = json.dumps(HOSTILE)  # a JSON string is a YAML double-quoted scalar

ORDERS = f"""
pack: orders
rules:
  - id: orders.out_of_stock
    description: {HOSTILE_YAML}
    when:
      status: 409
      json: [{{query: "error.code", equals: OUT_OF_STOCK}}]
    vars:
      sku: error.sku
    envelope:
      code: OUT_OF_STOCK
      category: conflict
      action: call_other_operation
      message: "Item {{{{ sku }}}} is out of stock."
      next_operation: "GET /api/items/{{{{ sku }}}}/alternatives"
      related_codes: [RATE_LIMITED, NOT_IN_CATALOG]
    docs:
      cause: The item sold out between listing and ordering.
      fix: Pick an alternative item and order that instead.
      stability: beta
      example: {{error: {{code: OUT_OF_STOCK, sku: "A-1"}}}}
  - id: orders.rate
    when: {{status: 429}}
    envelope: {{code: RATE_LIMITED, category: rate_limit}}
"""


@pytest.fixture
async def catalog(aiohttp_client: ClientFactory, tmp_path: Path) -> TestClient[Any, Any]:
    """A real mend (loopback port) with an operator rule file in front of the packs."""
    rules = tmp_path / "orders.yaml"
    rules.write_text(ORDERS)
    route = Route(name="default", upstream="http://127.0.0.1:9")
    settings = Settings(routes=(route,), rules=(rules,))
    server = create_app(settings, CollectorRegistry(), logger=make_logger(io.StringIO()))
    return await aiohttp_client(MendTestServer(server))


async def get_json(client: TestClient[Any, Any], path: str) -> Any:
    response = await client.get(path, headers={"Accept": "application/json"})
    assert response.status == 200
    assert response.content_type == "application/json"
    return await response.json()


async def test_an_entry_documents_what_an_agent_needs(catalog: TestClient[Any, Any]) -> None:
    """Severity, category, retryable, cause, repair, example, related, stability, rules."""
    entry = await get_json(catalog, "/_mend/errors/OUT_OF_STOCK")
    assert (entry["severity"], entry["category"], entry["retryable"]) == (
        "error",
        "conflict",
        False,
    )
    assert entry["cause"] == "The item sold out between listing and ordering."
    assert entry["repair"]["fix"] == "Pick an alternative item and order that instead."
    assert entry["related_codes"] == ["RATE_LIMITED", "NOT_IN_CATALOG"]
    assert entry["stability"] == "beta"
    assert [r["id"] for r in entry["rules"]] == ["orders.out_of_stock"]
    assert "source" not in entry["rules"][0]  # file:line is the operator's, not the agent's
    example = entry["example"]["error"]
    assert example["message"] == "Item A-1 is out of stock."
    assert example["next_operation"] == "GET /api/items/A-1/alternatives"
    assert example["rule"] == "orders.out_of_stock"
    assert entry["repair"]["steps"] == list(example["steps"])


@pytest.mark.parametrize(
    ("code", "retryable", "example_status"),
    [
        ("RATE_LIMITED", True, 429),  # no docs.example: built from an empty body
        ("UPSTREAM_TIMEOUT", True, None),  # mend's own failure: no upstream status
        ("OUT_OF_STOCK", False, 409),  # from the rule's docs.example
    ],
)
async def test_every_code_has_an_example_envelope(
    catalog: TestClient[Any, Any], code: str, retryable: bool, example_status: int | None
) -> None:
    """Rules without docs and mend's own codes still get an example payload."""
    entry = await get_json(catalog, f"/_mend/errors/{code}")
    example = entry["example"]["error"]
    assert example["code"] == code
    assert example["retryable"] is retryable
    assert example["upstream_status"] == example_status
    if retryable:
        assert isinstance(example["retry_after_ms"], int)


async def test_the_index_lists_every_code_once(catalog: TestClient[Any, Any]) -> None:
    """The JSON index has one entry per code, sorted, including the operator's and mend's own."""
    codes = [e["code"] for e in (await get_json(catalog, "/_mend/errors"))["errors"]]
    assert codes == sorted(set(codes))
    assert {"OUT_OF_STOCK", "RATE_LIMITED", "UPSTREAM_UNREACHABLE", "VALIDATION_FAILED"} <= set(
        codes
    )


@pytest.mark.parametrize("path", ["/_mend/errors", "/_mend/errors/OUT_OF_STOCK"])
async def test_html_escapes_rule_text(catalog: TestClient[Any, Any], path: str) -> None:
    """Operator text (a hostile description) appears escaped in HTML, never as markup."""
    response = await catalog.get(path, headers={"Accept": "text/html"})
    assert response.status == 200
    assert response.content_type == "text/html"
    text = await response.text()
    assert "<script>" not in text
    assert html.escape(HOSTILE, quote=True) in text


async def test_html_entry_has_every_section(catalog: TestClient[Any, Any]) -> None:
    """The HTML page carries cause, repair steps, the example and links to related codes."""
    response = await catalog.get("/_mend/errors/OUT_OF_STOCK", headers={"Accept": "text/html"})
    text = await response.text()
    for heading in ("Cause", "Repair", "Example payload", "Related codes", "Produced by"):
        assert f"<h2>{heading}</h2>" in text
    assert "<a href='/_mend/errors/RATE_LIMITED'>" in text
    assert "<code>NOT_IN_CATALOG</code>" in text  # not in the catalog: not a link
    assert "/_mend/errors/NOT_IN_CATALOG" not in text
    assert "Item A-1 is out of stock." in text


@pytest.mark.parametrize("accept", ["application/json", "text/html"])
async def test_unknown_codes_are_404_in_the_asked_format(
    catalog: TestClient[Any, Any], accept: str
) -> None:
    """An unknown code is a 404, in HTML or JSON as asked; HTML escapes the code it echoes."""
    response = await catalog.get("/_mend/errors/%3Cb%3ENOPE", headers={"Accept": accept})
    assert response.status == 404
    assert response.content_type == accept
    text = await response.text()
    if accept == "text/html":
        assert "<b>" not in text
        assert "&lt;b&gt;NOPE" in text
    else:
        assert json.loads(text)["error"] == "no code '<b>NOPE' in the catalog"


async def test_reload_shows_in_the_catalog(catalog: TestClient[Any, Any], tmp_path: Path) -> None:
    """A reloaded rule set is what the catalog documents next, with no restart."""
    assert (await catalog.get("/_mend/errors/TEAPOT")).status == 404
    (tmp_path / "orders.yaml").write_text(
        ORDERS + "  - id: orders.teapot\n    when: {status: 418}\n"
        "    envelope: {code: TEAPOT, category: validation}\n"
    )
    assert isinstance(catalog.server, MendTestServer)
    catalog.server.mend.proxy.store.reload()
    entry = await get_json(catalog, "/_mend/errors/TEAPOT")
    assert entry["rules"][0]["id"] == "orders.teapot"


async def test_a_reload_builds_the_catalog_before_anyone_asks(
    catalog: TestClient[Any, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reload builds the new catalog; a page after it only reads it (building it on the
    request held the event loop, and every proxied request, for a third of a second)."""
    (tmp_path / "orders.yaml").write_text(
        ORDERS + "  - id: orders.teapot\n    when: {status: 418}\n"
        "    envelope: {code: TEAPOT, category: validation}\n"
    )
    assert isinstance(catalog.server, MendTestServer)
    catalog.server.mend.proxy.store.reload()

    def built_on_request(*_: Any, **__: Any) -> Any:
        raise AssertionError("catalog built on a request")

    monkeypatch.setattr("proxy.edge.catalog.entries", built_on_request)
    entry = await get_json(catalog, "/_mend/errors/TEAPOT")
    assert entry["rules"][0]["id"] == "orders.teapot"


TEAPOT = (
    "  - id: orders.teapot\n    when: {status: 418}\n"
    "    envelope: {code: TEAPOT, category: validation}\n"
)


async def test_a_page_during_a_build_gets_the_catalog_before_it(
    catalog: TestClient[Any, Any], tmp_path: Path
) -> None:
    """While a reload's thread builds the new catalog, a page does not wait on the event loop
    (holding every proxied request): it is served the catalog in force before the reload."""
    assert isinstance(catalog.server, MendTestServer)
    mend = catalog.server.mend
    assert (await catalog.get("/_mend/errors/TEAPOT")).status == 404
    (tmp_path / "orders.yaml").write_text(ORDERS + TEAPOT)
    with mend.catalog._building:  # a build under way in another thread
        mend.proxy.store.engine = Engine.load(mend.proxy.store.settings)
        assert (await catalog.get("/_mend/errors/TEAPOT")).status == 404
    assert (await catalog.get("/_mend/errors/TEAPOT")).status == 200


async def test_a_catalog_that_fails_to_build_does_not_fail_the_reload(
    catalog: TestClient[Any, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reload has swapped the rules in when the catalog is built: its failure is the
    catalog's, reported by the page that asks next, not the reload's."""
    assert isinstance(catalog.server, MendTestServer)
    store = catalog.server.mend.proxy.store
    (tmp_path / "orders.yaml").write_text(ORDERS + TEAPOT)

    def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError("catalog bug")

    monkeypatch.setattr("proxy.edge.catalog.entries", broken)
    engine = store.reload()
    assert store.engine is engine
    assert any(rule.id == "orders.teapot" for rule in engine.rules)


@pytest.mark.parametrize(
    ("accept", "html_wanted"),
    [
        (None, False),
        ("*/*", False),
        ("application/json", False),
        ("text/html", True),
        ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", True),
        ("application/json, text/html;q=0.5", False),
        ("text/html;q=0, */*", False),
        ("text/*", True),
    ],
)
def test_accept_chooses_html_or_json(accept: str | None, html_wanted: bool) -> None:
    """HTML only when Accept prefers it over JSON; JSON is the default."""
    assert wants_html(accept) is html_wanted


@pytest.mark.parametrize(
    ("method", "path", "served_by_mend"),
    [
        ("GET", "/_mend/errors", True),
        ("HEAD", "/_mend/errors", True),
        ("GET", "/_mend/errors/RATE_LIMITED", True),
        ("POST", "/_mend/errors", False),
        ("DELETE", "/_mend/errors/RATE_LIMITED", False),
        ("GET", "/_mend/errors/", False),
        ("GET", "/_mend/errors/A/B", False),
        ("GET", "/_mend/errorsX", False),
        ("GET", "/_mend", False),
    ],
)
async def test_only_the_catalog_pages_are_mends(
    start_upstream: StartUpstream,
    start_mend: StartMend,
    method: str,
    path: str,
    served_by_mend: bool,
) -> None:
    """GET and HEAD of the two catalog pages are answered by mend; all else is the upstream's."""
    seen: list[str] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.path}")
        return web.Response(text="upstream")

    mend = await start_mend(await start_upstream({"/{tail:.*}": record}))
    resp = await mend.client.request(method, path, headers={"Accept": "application/json"})
    assert resp.status == 200
    assert seen == ([] if served_by_mend else [f"{method} {path}"])


@pytest.mark.parametrize(
    ("path", "status", "sent_id"),
    [
        ("/_mend/errors", 200, None),
        ("/_mend/errors/RATE_LIMITED", 200, "agent-7"),
        ("/_mend/errors/NO_SUCH_CODE", 404, None),
    ],
)
async def test_a_catalog_page_is_logged_like_any_request(
    start_upstream: StartUpstream,
    start_mend: StartMend,
    path: str,
    status: int,
    sent_id: str | None,
) -> None:
    """A page mend answers itself still gets its one log line and the request id header."""
    mend = await start_mend(await start_upstream({}))
    headers = {"Accept": "application/json"} | ({"X-Request-ID": sent_id} if sent_id else {})
    resp = await mend.client.get(path, headers=headers)
    assert resp.status == status
    [line] = mend.log_lines()
    assert line["request_id"] == resp.headers["X-Request-ID"]
    assert resp.headers["Server"] == "mend"
    if sent_id:
        assert line["request_id"] == sent_id
    assert (line["path"], line["status"], line["outcome"]) == (path, status, "catalog")
    assert line["latency_ms"] >= 0


_FILE_LINE = re.compile(r"\.ya?ml:\d+")


async def test_the_agent_port_shows_no_rule_source(catalog: TestClient[Any, Any]) -> None:
    """No page of the catalog, JSON or HTML, names a rule file and line."""
    index = await catalog.get("/_mend/errors", headers={"Accept": "application/json"})
    assert not _FILE_LINE.search(await index.text())
    for code in ("OUT_OF_STOCK", "VALIDATION_FAILED", "RATE_LIMITED"):
        for accept in ("application/json", "text/html"):
            page = await catalog.get(f"/_mend/errors/{code}", headers={"Accept": accept})
            assert page.status == 200
            assert not _FILE_LINE.search(await page.text()), (code, accept)


async def test_a_shared_code_is_described_as_itself(catalog: TestClient[Any, Any]) -> None:
    """VALIDATION_FAILED, produced by ~50 rules, is described from proxy/policy/envelope/codes.yaml
    (not by
    its
    first rule, a GraphQL one), with its named example, then lists every rule producing it."""
    entry = await get_json(catalog, "/_mend/errors/VALIDATION_FAILED")
    doc = load_codes()["VALIDATION_FAILED"]
    assert (entry["summary"], entry["cause"]) == (doc.summary, doc.cause)
    assert entry["repair"]["fix"] == doc.fix
    assert "graphql" not in entry["summary"].lower()
    assert entry["example_rule"] == "fastapi.validation"
    assert entry["example"]["error"]["rule"] == "fastapi.validation"
    ids = [r["id"] for r in entry["rules"]]
    assert {"fastapi.validation", "flask.webargs_validation", "fallback.422"} <= set(ids)
    assert ids.index("graphql.variable_enum") < ids.index("fastapi.validation")  # rule order


def test_every_shared_code_is_described() -> None:
    """Each code that two or more shipped rules produce has an entry in
    proxy/policy/envelope/codes.yaml, and
    every entry's example_rule produces its code."""
    engine = Engine.load(Settings(routes=(Route(name="default", upstream="http://127.0.0.1:9"),)))
    produced: dict[str, set[str]] = {}
    for rule in engine.rules:
        produced.setdefault(rule.envelope.spec.code, set()).add(rule.id)
    codes = load_codes()
    shared = {code for code, ids in produced.items() if len(ids) > 1}
    assert shared - set(codes) == set()
    for code, doc in codes.items():
        assert code in produced, code
        assert doc.example_rule is None or doc.example_rule in produced[code], code


async def test_the_admin_port_lists_rules_with_their_source(aiohttp_client: ClientFactory) -> None:
    """The operator keeps file:line: GET /rules on the admin port lists every rule in force with
    its source, in order (packs before fallbacks)."""
    settings = Settings(routes=(Route(name="a", upstream="http://127.0.0.1:9"),))
    store = RuleStore(settings, Engine.load(settings))
    admin = await aiohttp_client(
        create_admin_app(store, CollectorRegistry(), make_logger(io.StringIO()))
    )
    response = await admin.get("/rules")
    assert response.status == 200
    rules = (await response.json())["rules"]
    by_id = {r["id"]: r for r in rules}
    assert re.fullmatch(r".*43-fastapi\.yaml:\d+", by_id["fastapi.json_invalid"]["source"])
    assert by_id["fastapi.json_invalid"]["code"] == "MALFORMED_JSON"
    ids = [r["id"] for r in rules]
    assert ids.index("fastapi.json_invalid") < ids.index("fallback.500")
