"""OpenAPI documents as published (GitHub's REST description, Petstore, Train Travel), served by a
real mock server (Stoplight Prism) and driven by real clients, behind ``mend run``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
from aiohttp import web
from hypothesis.errors import Unsatisfiable
from multidict import CIMultiDict
from schemathesis.generation import GenerationMode
from yarl import URL

from proxy.policy.envelope.model import Envelope
from proxy.policy.openapi.spec import Mount, Spec
from tests.conftest import StartMend, StartUpstream
from tests.policy.openapi.conftest import Served
from tests.policy.openapi.prism_cases import (
    AUTH,
    error_of,
    exchange,
    generate,
    github_swept,
    named_by_mend,
    named_by_prism,
    operations,
    same,
    sweep,
)
from tests.published.documents import document

#: What loading GitHub's document may take on a shared two-core machine (about 1 s alone).
GITHUB_LOAD_S = 8.0
#: Peak memory of a process that loaded it (about 120 MiB, the interpreter's 60 included).
GITHUB_RSS_MIB = 320

_MEASURE = """
import json, resource, sys, time
from pathlib import Path

def peak_kib():
    # this process's own peak (VmHWM): ru_maxrss keeps the parent's when it was spawned by vfork
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
from proxy.policy.openapi.spec import Spec
started = time.perf_counter()
spec = Spec.load(Path(sys.argv[1]))
loaded = time.perf_counter() - started
for op in spec.operations.all[:100]:
    spec.checker.operation(op.method, op.path)
print(json.dumps({
    "operations": len(spec.operations.all),
    "load_s": loaded,
    "rss_mib": peak_kib() / 1024,
}))
"""


def _measure(path: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    figures: dict[str, float] = json.loads(done.stdout)
    return figures


def test_githubs_document_is_ready_in_seconds() -> None:
    """GitHub's 13 MB description loads in seconds, its 1,223 operations found, in little memory."""
    figures = _measure(document("github"))
    print(f"GitHub's document: {figures}")
    assert figures["operations"] == 1223
    assert figures["load_s"] < GITHUB_LOAD_S
    assert figures["rss_mib"] < GITHUB_RSS_MIB


@pytest.mark.parametrize("name", ["petstore", "train-travel"])
def test_published_documents_load(name: str) -> None:
    """The classic Petstore (3.0) and the Train Travel API (3.1) load with their operations."""
    spec = Spec.load(document(name))
    assert spec.operations.all
    assert all(op.id for op in spec.operations.all)


def _fields(error: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["field"]: f for f in error["invalid_fields"]}


def test_prisms_body_violations_get_pointers_and_the_documented_enum(
    petstore: Served,
) -> None:
    """Prism's 422 ``validation[]`` becomes every field's pointer, the enum's values the
    document's."""
    _, mend, _ = petstore
    body = {"name": 5, "photoUrls": "x", "status": "bogus"}
    response = httpx.post(f"{mend}/pet", json=body, headers=AUTH, timeout=10)
    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "VALIDATION_FAILED"
    fields = _fields(error)
    assert set(fields) == {"/name", "/photoUrls", "/status"}
    assert fields["/status"]["allowed_values"]["enum"] == ["available", "pending", "sold"]
    assert all(f["documented"] and f["location"] == "body" for f in fields.values())


def test_prisms_problem_gets_pointers_without_a_document(petstore: Served) -> None:
    """The pack alone reads Prism's ``validation[]``: pointers and the enum from the message."""
    _, _, plain = petstore
    body = {"name": "rex", "photoUrls": [], "status": "bogus"}
    response = httpx.post(f"{plain}/pet", json=body, headers=AUTH, timeout=10)
    fields = _fields(error_of(response))
    assert fields["/status"]["allowed_values"] == {"enum": ["available", "pending", "sold"]}


def test_prisms_header_violation_names_the_documented_query_parameter(
    petstore: Served,
) -> None:
    """An empty 400 whose ``sl-violations`` header names ``status.0`` (the first value of the
    array parameter) gets its pointer, as mend's own validation names it, and the enum of the
    array's items."""
    _, mend, _ = petstore
    response = httpx.get(
        f"{mend}/pet/findByStatus", params={"status": "bogus"}, headers=AUTH, timeout=10
    )
    assert response.status_code == 400
    error = error_of(response)
    assert error["field"] == "/status/0"
    status = _fields(error)["/status/0"]
    assert status["location"] == "query"
    assert status["allowed_values"]["enum"] == ["available", "pending", "sold"]
    assert status["suggested_value"] == "available"


def test_prisms_missing_required_parameters_are_each_named(
    petstore: Served,
) -> None:
    """``GET /user/login`` without its two required query parameters: both, in the query."""
    _, mend, plain = petstore
    for base in (mend, plain):
        error = error_of(httpx.get(f"{base}/user/login", headers=AUTH, timeout=10))
        assert [(f["field"], f["location"]) for f in error["invalid_fields"]] == [
            ("/username", "query"),
            ("/password", "query"),
        ]


def test_prisms_nested_and_indexed_body_members_keep_every_segment(
    petstore: Served,
) -> None:
    """``photoUrls.0`` and ``tags.0.id`` are ``/photoUrls/0`` and ``/tags/0/id``, documented."""
    _, mend, plain = petstore
    body = {"name": "rex", "photoUrls": [5], "tags": [{"id": "a"}]}
    for base in (mend, plain):
        response = httpx.post(f"{base}/pet", json=body, headers=AUTH, timeout=10)
        fields = _fields(error_of(response))
        assert set(fields) == {"/photoUrls/0", "/tags/0/id"}
        assert all(f["location"] == "body" for f in fields.values())
    fields = _fields(error_of(httpx.post(f"{mend}/pet", json=body, headers=AUTH, timeout=10)))
    assert fields["/tags/0/id"]["allowed_values"] == {"type": "integer", "format": "int64"}
    assert fields["/photoUrls/0"]["documented"] is True


#: GitHub requests Prism refuses, and (pointer, location, the document's enum or None) of every
#: violation it names in ``sl-violations`` (its body is the document's example error).
GITHUB_CASES = [
    (
        "/repos/o/r/issues?state=bogus&direction=up",
        [
            ("/state", "query", ["open", "closed", "all"]),
            ("/direction", "query", ["asc", "desc"]),
        ],
    ),
    (
        "/search/labels?q=x&repository_id=1&sort=bogus&order=up&per_page=abc",
        [
            ("/sort", "query", ["created", "updated"]),
            ("/order", "query", ["desc", "asc"]),
            ("/per_page", "query", None),
        ],
    ),
    ("/search/labels", [("/repository_id", "query", None), ("/q", "query", None)]),
    (
        "/repos/o/r/pulls?state=bogus&sort=bogus",
        [
            ("/state", "query", ["open", "closed", "all"]),
            ("/sort", "query", ["created", "updated", "popularity", "long-running"]),
        ],
    ),
]


@pytest.mark.slow  # Prism reads GitHub's 13 MB document in about ten seconds
@pytest.mark.parametrize(("path", "expected"), GITHUB_CASES)
def test_prisms_answers_on_githubs_document_get_every_pointer_and_enum(
    github: Served, path: str, expected: list[tuple[str, str, list[str] | None]]
) -> None:
    """Every violation Prism names is an invalid field, in the query, the document's enum its
    ``allowed_values``; without the document, the same pointers and locations."""
    _, mend, plain = github
    error = error_of(httpx.get(f"{mend}{path}", timeout=10))
    assert error["rule"] == "prism.sl_violations"
    fields = [(f["field"], f["location"]) for f in error["invalid_fields"]]
    assert fields == [(pointer, location) for pointer, location, _ in expected]
    for field, (_, _, enum) in zip(error["invalid_fields"], expected, strict=True):
        assert field["documented"] is True
        assert (field["allowed_values"] or {}).get("enum") == enum
        if enum is not None:
            assert field["suggested_value"] in enum
    bare = error_of(httpx.get(f"{plain}{path}", timeout=10))
    assert [(f["field"], f["location"]) for f in bare["invalid_fields"]] == fields


def test_prisms_lowercased_path_parameter_is_named_as_documented(
    petstore: Served,
) -> None:
    """Prism says ``petid``; the envelope names the document's ``/petId``, a path parameter."""
    _, mend, _ = petstore
    response = httpx.get(f"{mend}/pet/abc", headers=AUTH, timeout=10)
    assert response.status_code == 400
    error = error_of(response)
    assert error["field"] == "/petId"
    assert _fields(error)["/petId"]["location"] == "path"


def test_prisms_successes_pass_byte_identical(petstore: Served) -> None:
    """A documented success through mend is the bytes Prism sends directly."""
    upstream, mend, _ = petstore
    query = {"status": "available"}
    direct = httpx.get(f"{upstream}/pet/findByStatus", params=query, headers=AUTH, timeout=10)
    proxied = httpx.get(f"{mend}/pet/findByStatus", params=query, headers=AUTH, timeout=10)
    assert direct.status_code == proxied.status_code == 200
    assert proxied.content == direct.content


def test_next_operation_weighs_the_method(petstore: Served) -> None:
    """``GET /pets`` (a 404 from Prism) is sent to a GET operation, not to ``POST /pet``."""
    _, mend, _ = petstore
    response = httpx.get(f"{mend}/pets", headers=AUTH, timeout=10)
    assert response.status_code == 404
    error = error_of(response)
    assert error["next_operation"] == "GET /pet/findByStatus"
    assert error["action"] == "call_other_operation"


def test_a_405_carries_allow_from_the_document(petstore: Served) -> None:
    """Prism's 405 has no ``Allow``; through mend it has the document's methods for the path."""
    upstream, mend, _ = petstore
    direct = httpx.patch(f"{upstream}/pet", headers=AUTH, timeout=10)
    assert direct.status_code == 405
    assert "Allow" not in direct.headers
    response = httpx.patch(f"{mend}/pet", headers=AUTH, timeout=10)
    assert response.status_code == 405
    assert response.headers["Allow"] == "POST, PUT"
    assert error_of(response)["allowed_values"]["methods"] == ["POST", "PUT"]


def test_a_405_hint_cites_no_null_field(petstore: Served) -> None:
    """Without a document nothing lists the methods: the hint and steps do not send the agent
    to ``allowed_values``, which is null."""
    _, _, plain = petstore
    response = httpx.patch(f"{plain}/pet", headers=AUTH, timeout=10)
    error = error_of(response)
    assert error["allowed_values"] is None
    assert "allowed_values" not in error["hint"]
    assert not any("allowed_values" in step for step in error["steps"])


async def test_next_operation_weighs_the_method_on_githubs_document(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """``POST /user/repo`` fits ``GET /user/{account_id}``'s template; the nearest operation is
    ``POST /user/repos``."""

    async def not_found(_: web.Request) -> web.Response:
        return web.json_response({"message": "Not Found"}, status=404)

    server = await start_upstream({"/{tail:.*}": not_found})
    mend = await start_mend(server, route={"openapi": document("github")})
    response = await mend.client.post("/user/repo", json={"name": "x"})
    error = (await response.json())["error"]
    assert error["next_operation"] == "POST /user/repos"
    assert "POST /user/repos" in error["allowed_values"]["operations"]


def _refusal(spec: Spec, base: str, case: Any) -> str | None:
    """``case`` serialised by ``requests`` as a client would, through mend's checker: why it
    was refused, or ``None``."""
    kwargs = case.as_transport_kwargs(base_url=base)
    wanted = ("method", "url", "params", "headers", "json", "data")
    prepared = requests.Request(**{k: v for k, v in kwargs.items() if k in wanted}).prepare()
    url = URL(str(prepared.url), encoded=True)
    sent: Any = prepared.body or b""
    body = sent.encode() if isinstance(sent, str) else bytes(sent)
    located = spec.locate(str(prepared.method), url.raw_path, Mount("/", False, ""))
    match = located.match if located is not None else None
    if match is None or match.operation is None:
        return f"{prepared.method} {url.raw_path}: not located"
    content_type = str(prepared.headers.get("Content-Type", ""))
    found = spec.checker.check(match, url.query, CIMultiDict(prepared.headers), content_type, body)
    if found:
        return f"{prepared.method} {url.raw_path}: {[(v.pointer, v.reason) for v in found[:3]]}"
    return None


def _refusals(spec: Spec, path: Path, per_operation: int) -> tuple[int, list[str]]:
    """Schemathesis' valid requests for every operation of ``path``: how many were checked, and
    the ones mend refused."""
    base = "http://upstream" + spec.operations.base_path
    checked: list[str | None] = []
    for operation in operations(path):
        generate(operation, per_operation, lambda case: checked.append(_refusal(spec, base, case)))
    return len(checked), [r for r in checked if r is not None]


@pytest.mark.parametrize(
    ("name", "per_operation"),
    [
        ("petstore", 25),
        ("train-travel", 25),
        pytest.param("github", 2, marks=pytest.mark.slow),  # ~2,400 requests, a few minutes
    ],
)
def test_generated_valid_requests_are_never_refused(name: str, per_operation: int) -> None:
    """Every request Schemathesis generates as valid for the document passes validation."""
    path = document(name)
    sent, refused = _refusals(Spec.load(path), path, per_operation)
    print(f"{name}: {sent} generated valid requests, {len(refused)} refused")
    assert sent > 5 * per_operation
    assert refused == []


@pytest.mark.slow  # about 400 exchanges, each sent twice
def test_generated_exchanges_through_mend(petstore: Served) -> None:
    """Schemathesis' requests, valid and invalid, sent to Prism directly and through mend: every
    success byte-identical, every error a valid envelope with the upstream's status."""
    upstream, mend, _ = petstore
    counts = {"success": 0, "error": 0}
    for operation in operations(document("petstore")):
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                generate(operation, 10, lambda case: _compare(case, upstream, mend, counts), mode)
            except Unsatisfiable:  # an operation with nothing to get wrong
                continue
    print(f"Petstore through mend: {counts}")
    assert counts["success"] > 50
    assert counts["error"] > 50


def _compare(case: Any, upstream: str, mend: str, counts: dict[str, int]) -> None:
    try:
        direct = exchange(case, upstream)
    except httpx.TimeoutException:  # Prism never answers some malformed requests
        counts["unanswered"] = counts.get("unanswered", 0) + 1
        return
    proxied = exchange(case, mend)
    if direct.status_code < 400:
        counts["success"] += 1
        assert proxied.status_code == direct.status_code
        assert proxied.content == direct.content
    else:
        counts["error"] += 1
        envelope = Envelope.model_validate(proxied.json()["error"])
        assert envelope.upstream_status == direct.status_code


@pytest.mark.slow  # about 200 invalid requests, each sent twice
def test_every_pointer_and_enum_prism_names_on_petstore(petstore: Served) -> None:
    upstream, mend, _ = petstore
    counts = sweep(document("petstore"), upstream, mend, lambda op: True, 10)
    print(f"Petstore: {counts}")
    assert counts["violations"] > 20
    assert counts["enums"] > 0


@pytest.mark.slow  # about 100 invalid requests, each sent twice
def test_every_pointer_and_enum_prism_names_on_train_travel(train_travel: Served) -> None:
    """The third document (OpenAPI 3.1): its path, query and body violations as Prism names
    them, the enums of its query parameters and body members."""
    upstream, mend, _ = train_travel
    counts = sweep(document("train-travel"), upstream, mend, lambda op: True, 20)
    print(f"Train Travel: {counts}")
    assert counts["operations"] == 7
    assert counts["violations"] > 20
    # its enums are a payment's (currency; account_type under the source's anyOf), which
    # Schemathesis' negative cases seldom get wrong alone: the next test names them


#: A booking's payment, valid but for the document's enums (the currency, a bank account's type).
PAYMENT = {
    "amount": 10,
    "currency": "xxx",
    "source": {
        "object": "bank_account",
        "name": "x",
        "number": "1",
        "sort_code": "1",
        "account_type": "bogus",
        "bank_name": "b",
        "country": "gb",
    },
}


@pytest.mark.slow  # Prism and two mends
def test_prisms_enums_on_train_travel_are_the_documents(train_travel: Served) -> None:
    """A payment's wrong currency and account type: where Prism names the enum, the envelope
    offers it, under ``anyOf`` too, in the body; without the document, the same pointers."""
    upstream, mend, plain = train_travel
    path = "/bookings/1725ff48-ab45-4bb5-9d02-88745177dedb/payment"
    direct = httpx.post(f"{upstream}{path}", json=PAYMENT, headers=AUTH, timeout=10)
    expected = named_by_prism(direct)
    enums = {pointer: enum for pointer, _, enum in expected if enum is not None}
    assert enums == {
        "/currency": ["bam", "bgn", "chf", "eur", "gbp", "nok", "sek", "try"],
        "/source/account_type": ["individual", "company"],
    }
    found = error_of(httpx.post(f"{mend}{path}", json=PAYMENT, headers=AUTH, timeout=10))
    got = named_by_mend(found)
    assert len(got) == len(expected)
    assert all(same(p, m) for p, m in zip(expected, got, strict=True)), (expected, got)
    bare = error_of(httpx.post(f"{plain}{path}", json=PAYMENT, headers=AUTH, timeout=10))
    assert [f[:2] for f in named_by_mend(bare)] == [f[:2] for f in got]


@pytest.mark.slow  # Prism reads GitHub's 13 MB document in about ten seconds
def test_every_pointer_and_enum_prism_names_on_github(github: Served) -> None:
    upstream, mend, _ = github
    counts = sweep(document("github"), upstream, mend, github_swept, 15)
    print(f"GitHub: {counts}")
    assert counts["operations"] == 12
    assert counts["violations"] > 40
    assert counts["enums"] > 10


@pytest.mark.parametrize(
    ("method", "path", "meant"),
    [
        # a method the documented path lacks: what that path allows, the kindred method first
        ("PUT", "/repos/octocat/hello-world/pulls", "POST /repos/{owner}/{repo}/pulls"),
        (
            "DELETE",
            "/repos/octocat/hello-world/issues/7",
            "GET /repos/{owner}/{repo}/issues/{issue_number}",
        ),
        # a leading segment the document does not have (GitHub's /v3 of old): passed over
        ("GET", "/v3/repos/octocat/hello-world", "GET /repos/{owner}/{repo}"),
        # a typo on the resource's name: the resource, with the method sent
        ("GET", "/repos/octocat/hello-world/issue", "GET /repos/{owner}/{repo}/issues"),
    ],
)
async def test_next_operation_is_on_the_resource_the_agent_addressed(
    start_upstream: StartUpstream, start_mend: StartMend, method: str, path: str, meant: str
) -> None:
    """The operation suggested shares the resource the agent's path names (issue 42): never
    ``DELETE .../releases/{release_id}`` for an issue because its method matches."""

    async def not_found(_: web.Request) -> web.Response:
        return web.json_response({"message": "Not Found"}, status=404)

    server = await start_upstream({"/{tail:.*}": not_found})
    mend = await start_mend(server, route={"openapi": document("github")})
    response = await mend.client.request(method, path, json={} if method != "GET" else None)
    error = (await response.json())["error"]
    assert error["next_operation"] == meant
    resource = meant.split(" ", 1)[1].split("/")[1:4]
    for operation in error["allowed_values"]["operations"]:
        assert operation.split(" ", 1)[1].split("/")[1:4] == resource, operation


async def test_no_operation_of_a_parent_or_a_wildcard_resource_is_offered(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A mistyped sub-resource is offered that sub-resource's operations only: not its parent's
    (``DELETE .../issues/{issue_number}`` for ``.../issues/7/timelin``), nor a template's whose
    parameter would take the word sent (``/orgs/{org}/{security_product}/{enablement}``)."""

    async def not_found(_: web.Request) -> web.Response:
        return web.json_response({"message": "Not Found"}, status=404)

    server = await start_upstream({"/{tail:.*}": not_found})
    mend = await start_mend(server, route={"openapi": document("github")})
    meant = {
        "/repos/octocat/hello-world/issues/7/timelin": [
            "GET /repos/{owner}/{repo}/issues/{issue_number}/timeline"
        ],
        "/orgs/github/package": ["GET /orgs/{org}/packages"],
        "/users/octocat/installatio": ["GET /users/{username}/installation"],
    }
    for path, operations_meant in meant.items():
        error = (await (await mend.client.get(path)).json())["error"]
        assert error["allowed_values"]["operations"] == operations_meant, path


async def test_no_next_operation_when_nothing_is_on_the_resource(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A path whose resource the document does not have gets no guess: no ``next_operation``."""

    async def not_found(_: web.Request) -> web.Response:
        return web.json_response({"message": "Not Found"}, status=404)

    server = await start_upstream({"/{tail:.*}": not_found})
    mend = await start_mend(server, route={"openapi": document("github")})
    response = await mend.client.get("/repos/octocat/hello-world/tickets/3")
    error = (await response.json())["error"]
    assert error["next_operation"] is None
