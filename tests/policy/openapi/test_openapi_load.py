"""Loading OpenAPI documents: versions, formats, refs, file:line errors, reloads, matching."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from multidict import CIMultiDict, MultiDict

from proxy.config.route import Route
from proxy.config.settings import Settings
from proxy.config.yamlfile import RuleError
from proxy.policy.openapi import document as documents
from proxy.policy.openapi import facts
from proxy.policy.openapi.spec import Mount, Spec
from proxy.policy.rules.ruleengine import Engine, RuleStore

DATA = Path(__file__).parents[2] / "data" / "openapi"
ROOT = Mount("/", False, "")


def _settings(document: Path) -> Settings:
    route = Route(name="shop", upstream="http://127.0.0.1:9/api/v1", openapi=document)
    return Settings(routes=(route,), default_packs=False)


@pytest.mark.parametrize("name", ["shop-3.0.yaml", "shop-3.1.json"])
def test_both_versions_load_with_their_operations(name: str) -> None:
    """3.0 YAML and 3.1 JSON give the same operations, the base path from ``servers``."""
    spec = Spec.load(DATA / name)
    assert spec.operations.base_path == "/api/v1"
    assert sorted(op.id for op in spec.operations.all) == [
        "cancelOrder",
        "createOrder",
        "finalizeOrder",
        "getOrder",
        "latestOrder",
        "listOrders",
    ]


def test_literal_segments_win_over_templated_ones() -> None:
    """``/orders/latest`` is its own operation, not ``/orders/{orderId}`` with id "latest"."""
    spec = Spec.load(DATA / "shop-3.0.yaml")
    located = spec.locate("GET", "/api/v1/orders/latest", ROOT)
    assert located is not None
    assert located.match is not None
    assert located.match.operation is not None
    assert located.match.operation.id == "latestOrder"
    other = spec.locate("GET", "/api/v1/orders/17", ROOT)
    assert other is not None
    assert other.match is not None
    assert other.match.params == {"orderId": "17"}


def test_paths_outside_the_base_path_are_not_the_documents() -> None:
    """A request outside ``servers``' base path matches nothing and is left alone."""
    spec = Spec.load(DATA / "shop-3.0.yaml")
    assert spec.locate("GET", "/admin/orders", ROOT) is None


def test_mount_maps_agent_paths_through_prefix_and_upstream_base() -> None:
    """With a stripped prefix and an upstream base, the agent's paths still find operations,
    and the paths an envelope names are ones the agent sends."""
    spec = Spec.load(DATA / "shop-3.0.yaml")
    mount = Mount("/shop", True, "/api/v1")
    located = spec.locate("GET", "/shop/orders/5", mount)
    assert located is not None
    assert located.match is not None
    assert located.match.template.path == "/orders/{orderId}"
    assert spec.agent_path("/orders/{orderId}", mount) == "/shop/orders/{orderId}"


def _broken(tmp_path: Path, text: str, suffix: str = ".yaml") -> Path:
    path = tmp_path / f"broken{suffix}"
    path.write_text(text, encoding="utf-8")
    return path


def test_an_invalid_document_is_a_file_line_error(tmp_path: Path) -> None:
    """A schema with a misspelt type is reported at its line."""
    path = _broken(
        tmp_path,
        "openapi: 3.0.3\n"
        "info: {title: x, version: '1'}\n"
        "paths:\n"
        "  /a:\n"
        "    get:\n"
        "      parameters:\n"
        "        - name: q\n"
        "          in: query\n"
        "          schema: {type: intger}\n"
        "      responses: {'200': {description: ok}}\n",
    )
    with pytest.raises(RuleError) as caught:
        Spec.load(path)
    assert caught.value.problems[0].startswith(f"{path}:7: ")


def _many_paths(count: int) -> dict[str, object]:
    """A valid 3.0 document of ``count`` operations (about 20 nodes each)."""
    ok = {"200": {"description": "ok"}}
    paths = {
        f"/things{i}/{{id}}": {
            "get": {
                "operationId": f"thing{i}",
                "parameters": [
                    {"name": "id", "in": "path", "required": True, "schema": {"type": "integer"}}
                ],
                "responses": ok,
            }
        }
        for i in range(count)
    }
    return {"openapi": "3.0.3", "info": {"title": "x", "version": "1"}, "paths": paths}


def test_a_json_documents_problem_is_at_its_line(tmp_path: Path) -> None:
    """A JSON document is read as JSON, and a problem in it is still reported at its line."""
    document = json.loads((DATA / "shop-3.1.json").read_text())
    document["paths"]["/orders"]["get"]["parameters"][1]["in"] = "body"
    text = json.dumps(document, indent=2)
    path = _broken(tmp_path, text, ".json")
    with pytest.raises(RuleError) as caught:
        Spec.load(path)
    line = next(n for n, t in enumerate(text.splitlines(), 1) if '"in": "body"' in t)
    assert caught.value.problems[0].startswith(f"{path}:{line}: "), caught.value.problems


def _nodes(node: object) -> int:
    """Keys, values and items, as the YAML bound counts them."""
    if isinstance(node, dict):
        return 1 + sum(1 + _nodes(v) for v in node.values())
    if isinstance(node, list):
        return 1 + sum(_nodes(v) for v in node)
    return 1


@pytest.mark.parametrize(
    "suffix", [".json", pytest.param(".yaml", marks=pytest.mark.slow)]
)  # PyYAML reads 100,000 nodes in about 10 s
def test_api_documents_have_a_node_bound_of_their_own(tmp_path: Path, suffix: str) -> None:
    """A document past the rule files' 100,000 nodes loads (JSON or YAML)."""
    document = _many_paths(4200)
    assert _nodes(document) > 100_000
    path = tmp_path / f"big{suffix}"
    path.write_text(json.dumps(document) if suffix == ".json" else yaml.safe_dump(document))
    assert len(Spec.load(path).operations.all) == 4200


def test_an_api_document_past_its_node_bound_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound for API documents holds for JSON too, named in the problem."""
    monkeypatch.setattr(documents, "MAX_DOCUMENT_NODES", 500)
    path = _broken(tmp_path, json.dumps(_many_paths(50)), ".json")
    with pytest.raises(RuleError, match="past 500 nodes"):
        Spec.load(path)


def test_thorough_checks_what_the_schema_alone_does_not(tmp_path: Path) -> None:
    """A default of the wrong type passes the load's schema check; ``thorough`` (``mend check
    --openapi``) finds it."""
    document = _many_paths(1)
    operation = document["paths"]["/things0/{id}"]["get"]  # type: ignore[index]
    operation["parameters"].append(
        {"name": "q", "in": "query", "schema": {"type": "integer", "default": "x"}}
    )
    path = _broken(tmp_path, json.dumps(document), ".json")
    assert Spec.load(path).operations.all
    with pytest.raises(RuleError, match="'x' is not of type 'integer'"):
        Spec.load(path, thorough=True)


def test_an_unknown_version_is_refused(tmp_path: Path) -> None:
    """Swagger 2.0 (or no version) is refused with the line of ``openapi:``."""
    path = _broken(tmp_path, "info: {}\nopenapi: 2.0\npaths: {}\n")
    with pytest.raises(RuleError, match=r":2: openapi: 2.0: give 3.0.x or 3.1.x"):
        Spec.load(path)


@pytest.mark.parametrize("validate", [True, False])
def test_a_validating_route_compiles_its_shared_parts_at_load(validate: bool) -> None:
    """With ``validate_requests`` the validators' shared registry is built with the rules (off
    the event loop); without it, never."""
    route = Route(
        name="shop",
        upstream="http://127.0.0.1:9/api/v1",
        openapi=DATA / "shop-3.0.yaml",
        validate_requests=validate,
    )
    engine = Engine.load(Settings(routes=(route,), default_packs=False))
    assert engine.specs["shop"].checker.prepared is validate


def test_a_dangling_ref_is_an_error(tmp_path: Path) -> None:
    """A ``$ref`` to nowhere stops the load instead of failing on a request later."""
    document = json.loads((DATA / "shop-3.1.json").read_text())
    document["paths"]["/orders"]["get"]["parameters"][1]["schema"] = {
        "$ref": "#/components/schemas/Nope"
    }
    path = _broken(tmp_path, json.dumps(document), ".json")
    with pytest.raises(RuleError, match="Nope"):
        Spec.load(path)


def test_external_refs_are_refused(tmp_path: Path) -> None:
    """mend reads no other file and fetches no URL a document names."""
    document = json.loads((DATA / "shop-3.1.json").read_text())
    document["components"]["schemas"]["Status"] = {"$ref": "http://example.com/s.json"}
    path = _broken(tmp_path, json.dumps(document, indent=1), ".json")
    with pytest.raises(RuleError, match=r"only local #/\.\.\. refs"):
        Spec.load(path)


def test_a_bad_document_never_replaces_a_good_one(tmp_path: Path) -> None:
    """Reloading with a broken document keeps the last good one in force."""
    path = tmp_path / "shop.yaml"
    shutil.copy(DATA / "shop-3.0.yaml", path)
    settings = _settings(path)
    store = RuleStore(settings, Engine.load(settings))
    good = store.engine.specs["shop"]
    path.write_text("openapi: 3.0.3\npaths: {}\n", encoding="utf-8")  # no info
    with pytest.raises(RuleError):
        store.reload()
    assert store.engine.specs["shop"] is good
    shutil.copy(DATA / "shop-3.1.json", path)
    store.reload()
    assert store.engine.specs["shop"].document.version == "3.1"


def test_validate_requests_needs_a_document() -> None:
    """``validate_requests: true`` without ``openapi:`` is a configuration error."""
    with pytest.raises(ValueError, match="needs openapi"):
        Route(name="r", upstream="http://127.0.0.1:9", validate_requests=True)


@pytest.mark.parametrize(
    ("allowed", "received", "expected"),
    [
        ({"enum": ["low", "medium", "high"]}, "HIGH", "high"),
        ({"enum": ["low", "medium", "high"]}, "meduim", "medium"),
        ({"type": "integer", "minimum": 1, "maximum": 99}, 0, 1),
        ({"type": "integer", "minimum": 1, "maximum": 99}, 500, 99),
        ({"type": "integer", "exclusiveMaximum": 100}, 500, 99),
        ({"type": "string", "maxLength": 3}, "abcdef", "abc"),
        ({"type": "string", "pattern": "^[A-Z]+$"}, "abc", None),
        pytest.param({"type": "integer", "minimum": 1, "maximum": 100}, "nan", None, id="nan"),
        pytest.param({"type": "integer", "minimum": 1}, "inf", None, id="inf"),
        pytest.param({"type": "integer"}, "-Infinity", None, id="-inf"),
        pytest.param({"type": "integer"}, float("nan"), None, id="nan-in-a-body"),
        pytest.param({"type": "integer"}, float("inf"), None, id="inf-in-a-body"),
    ],
)
def test_suggestions(allowed: dict[str, object], received: object, expected: object) -> None:
    """The nearest enum value (case, then edit distance), a clamped bound, a cut string; none
    where nothing can be chosen (a pattern; a number that is not finite, sent as a query's text
    or in a body, which ``round`` refused with a ValueError, found by the property test)."""
    assert facts.suggest(allowed, received) == expected


def test_checker_accepts_the_document_examples() -> None:
    """What the document calls an example of a body is valid for mend's own checker."""
    spec = Spec.load(DATA / "shop-3.0.yaml")
    located = spec.locate("POST", "/api/v1/orders", ROOT)
    assert located is not None
    assert located.match is not None
    operation = located.match.operation
    assert operation is not None
    assert operation.body is not None
    body = json.dumps(facts.example(operation.body.schema, spec.document)).encode()
    found = spec.checker.check(located.match, MultiDict(), CIMultiDict(), "application/json", body)
    assert found == []


@pytest.mark.parametrize("name", ["shop-3.0.yaml", "shop-3.1.json"])
def test_null_is_valid_where_the_document_allows_it(name: str) -> None:
    """``nullable: true`` (3.0) and ``type: [string, "null"]`` (3.1) accept null, and only there:
    the fast validator reads 3.0's ``nullable`` as the Python one does."""
    spec = Spec.load(DATA / name)
    located = spec.locate("POST", "/api/v1/orders", ROOT)
    assert located is not None
    match = located.match
    assert match is not None
    order = {
        "customer": {"email": "a@example.com"},
        "priority": "low",
        "items": [{"sku": "ABC-1234", "qty": 1}],
        "note": None,
    }
    headers: CIMultiDict[str] = CIMultiDict()

    def check(document: object) -> list[str]:
        body = json.dumps(document).encode()
        found = spec.checker.check(match, MultiDict(), headers, "application/json", body)
        return [v.pointer for v in found]

    assert check(order) == []
    assert check({**order, "priority": None}) == ["/priority"]


def test_patterns_run_in_linear_time(tmp_path: Path) -> None:
    """A catastrophic pattern in the document (``^(a+)+$``) meets an agent's key and value built
    to make ``re`` backtrack for hours: both validators match in linear time, and the violations
    are still reported."""
    document = {
        "openapi": "3.1.0",
        "info": {"title": "t", "version": "1"},
        "paths": {
            "/t": {
                "post": {
                    "requestBody": {
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "properties": {"v": {"type": "string", "pattern": "^(a+)+$"}},
                                    "patternProperties": {"^(a+)+$": {"type": "integer"}},
                                    "additionalProperties": False,
                                }
                            }
                        }
                    },
                    "responses": {"200": {"description": "ok"}},
                }
            }
        },
    }
    path = tmp_path / "t.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    spec = Spec.load(path)
    located = spec.locate("POST", "/t", ROOT)
    assert located is not None
    assert located.match is not None
    evil = "a" * 40 + "!"
    body = json.dumps({"v": evil, evil: 1, "aaaa": "x"}).encode()
    found = spec.checker.check(located.match, MultiDict(), CIMultiDict(), "application/json", body)
    assert {v.pointer for v in found} == {"/v", f"/{evil}", "/aaaa"}
