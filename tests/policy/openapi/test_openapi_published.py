"""OpenAPI documents as published (GitHub's REST description, Petstore, Train Travel), served by a
real mock server (Stoplight Prism) and driven by real clients, behind ``mend run``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from aiohttp import web
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from multidict import CIMultiDict
from schemathesis.generation import GenerationMode
from yarl import URL

from proxy.policy.envelope import Envelope
from proxy.policy.openapi.spec import Mount, Spec
from tests.conftest import StartMend, StartUpstream
from tests.published.documents import document, mend_run, prism

#: Petstore's operations need a credential; Prism checks only that one is there.
AUTH = {"Authorization": "Bearer agent", "api_key": "agent"}

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


@pytest.fixture(scope="module")
def petstore(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str]]:
    """Prism mocking Petstore; ``mend run`` in front with the document and without: three URLs.

    Prism serves the paths at its root whatever ``servers`` says, so mend is given the document
    with ``servers`` naming that root, as an operator deploying a mock would."""
    logs = tmp_path_factory.mktemp("petstore")
    published = json.loads(document("petstore").read_bytes())
    path = logs / "petstore.json"
    path.write_text(json.dumps({**published, "servers": [{"url": "/"}]}))
    with (
        prism(path, logs / "prism.log") as upstream,
        mend_run("--upstream", upstream, "--openapi", str(path), log=logs / "mend.log") as mend,
        mend_run("--upstream", upstream, log=logs / "plain.log") as plain,
    ):
        yield upstream, mend, plain


def _error(response: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


def _fields(error: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["field"]: f for f in error["invalid_fields"]}


def test_prisms_body_violations_get_pointers_and_the_documented_enum(
    petstore: tuple[str, str, str],
) -> None:
    """Prism's 422 ``validation[]`` becomes every field's pointer, the enum's values the
    document's."""
    _, mend, _ = petstore
    body = {"name": 5, "photoUrls": "x", "status": "bogus"}
    response = httpx.post(f"{mend}/pet", json=body, headers=AUTH, timeout=10)
    assert response.status_code == 422
    error = _error(response)
    assert error["code"] == "VALIDATION_FAILED"
    fields = _fields(error)
    assert set(fields) == {"/name", "/photoUrls", "/status"}
    assert fields["/status"]["allowed_values"]["enum"] == ["available", "pending", "sold"]
    assert all(f["documented"] and f["location"] == "body" for f in fields.values())


def test_prisms_problem_gets_pointers_without_a_document(petstore: tuple[str, str, str]) -> None:
    """The pack alone reads Prism's ``validation[]``: pointers and the enum from the message."""
    _, _, plain = petstore
    body = {"name": "rex", "photoUrls": [], "status": "bogus"}
    response = httpx.post(f"{plain}/pet", json=body, headers=AUTH, timeout=10)
    fields = _fields(_error(response))
    assert fields["/status"]["allowed_values"] == {"enum": ["available", "pending", "sold"]}


def test_prisms_header_violation_names_the_documented_query_parameter(
    petstore: tuple[str, str, str],
) -> None:
    """An empty 400 whose ``sl-violations`` header names ``status.0`` (the first value of the
    array parameter) gets its pointer, as mend's own validation names it, and the enum of the
    array's items."""
    _, mend, _ = petstore
    response = httpx.get(
        f"{mend}/pet/findByStatus", params={"status": "bogus"}, headers=AUTH, timeout=10
    )
    assert response.status_code == 400
    error = _error(response)
    assert error["field"] == "/status/0"
    status = _fields(error)["/status/0"]
    assert status["location"] == "query"
    assert status["allowed_values"]["enum"] == ["available", "pending", "sold"]
    assert status["suggested_value"] == "available"


def test_prisms_missing_required_parameters_are_each_named(
    petstore: tuple[str, str, str],
) -> None:
    """``GET /user/login`` without its two required query parameters: both, in the query."""
    _, mend, plain = petstore
    for base in (mend, plain):
        error = _error(httpx.get(f"{base}/user/login", headers=AUTH, timeout=10))
        assert [(f["field"], f["location"]) for f in error["invalid_fields"]] == [
            ("/username", "query"),
            ("/password", "query"),
        ]


def test_prisms_nested_and_indexed_body_members_keep_every_segment(
    petstore: tuple[str, str, str],
) -> None:
    """``photoUrls.0`` and ``tags.0.id`` are ``/photoUrls/0`` and ``/tags/0/id``, documented."""
    _, mend, plain = petstore
    body = {"name": "rex", "photoUrls": [5], "tags": [{"id": "a"}]}
    for base in (mend, plain):
        response = httpx.post(f"{base}/pet", json=body, headers=AUTH, timeout=10)
        fields = _fields(_error(response))
        assert set(fields) == {"/photoUrls/0", "/tags/0/id"}
        assert all(f["location"] == "body" for f in fields.values())
    fields = _fields(_error(httpx.post(f"{mend}/pet", json=body, headers=AUTH, timeout=10)))
    assert fields["/tags/0/id"]["allowed_values"] == {"type": "integer", "format": "int64"}
    assert fields["/photoUrls/0"]["documented"] is True


@pytest.fixture(scope="module")
def github(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str]]:
    """Prism mocking GitHub's document; ``mend run`` in front with it and without: three
    URLs."""
    logs = tmp_path_factory.mktemp("github")
    path = document("github")
    with (
        prism(path, logs / "prism.log") as upstream,
        mend_run("--upstream", upstream, "--openapi", str(path), log=logs / "mend.log") as mend,
        mend_run("--upstream", upstream, log=logs / "plain.log") as plain,
    ):
        yield upstream, mend, plain


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
    github: tuple[str, str, str], path: str, expected: list[tuple[str, str, list[str] | None]]
) -> None:
    """Every violation Prism names is an invalid field, in the query, the document's enum its
    ``allowed_values``; without the document, the same pointers and locations."""
    _, mend, plain = github
    error = _error(httpx.get(f"{mend}{path}", timeout=10))
    assert error["rule"] == "prism.sl_violations"
    fields = [(f["field"], f["location"]) for f in error["invalid_fields"]]
    assert fields == [(pointer, location) for pointer, location, _ in expected]
    for field, (_, _, enum) in zip(error["invalid_fields"], expected, strict=True):
        assert field["documented"] is True
        assert (field["allowed_values"] or {}).get("enum") == enum
        if enum is not None:
            assert field["suggested_value"] in enum
    bare = _error(httpx.get(f"{plain}{path}", timeout=10))
    assert [(f["field"], f["location"]) for f in bare["invalid_fields"]] == fields


def test_prisms_lowercased_path_parameter_is_named_as_documented(
    petstore: tuple[str, str, str],
) -> None:
    """Prism says ``petid``; the envelope names the document's ``/petId``, a path parameter."""
    _, mend, _ = petstore
    response = httpx.get(f"{mend}/pet/abc", headers=AUTH, timeout=10)
    assert response.status_code == 400
    error = _error(response)
    assert error["field"] == "/petId"
    assert _fields(error)["/petId"]["location"] == "path"


def test_prisms_successes_pass_byte_identical(petstore: tuple[str, str, str]) -> None:
    """A documented success through mend is the bytes Prism sends directly."""
    upstream, mend, _ = petstore
    query = {"status": "available"}
    direct = httpx.get(f"{upstream}/pet/findByStatus", params=query, headers=AUTH, timeout=10)
    proxied = httpx.get(f"{mend}/pet/findByStatus", params=query, headers=AUTH, timeout=10)
    assert direct.status_code == proxied.status_code == 200
    assert proxied.content == direct.content


def test_next_operation_weighs_the_method(petstore: tuple[str, str, str]) -> None:
    """``GET /pets`` (a 404 from Prism) is sent to a GET operation, not to ``POST /pet``."""
    _, mend, _ = petstore
    response = httpx.get(f"{mend}/pets", headers=AUTH, timeout=10)
    assert response.status_code == 404
    error = _error(response)
    assert error["next_operation"] == "GET /pet/findByStatus"
    assert error["action"] == "call_other_operation"


def test_a_405_carries_allow_from_the_document(petstore: tuple[str, str, str]) -> None:
    """Prism's 405 has no ``Allow``; through mend it has the document's methods for the path."""
    upstream, mend, _ = petstore
    direct = httpx.patch(f"{upstream}/pet", headers=AUTH, timeout=10)
    assert direct.status_code == 405
    assert "Allow" not in direct.headers
    response = httpx.patch(f"{mend}/pet", headers=AUTH, timeout=10)
    assert response.status_code == 405
    assert response.headers["Allow"] == "POST, PUT"
    assert _error(response)["allowed_values"]["methods"] == ["POST", "PUT"]


def test_a_405_hint_cites_no_null_field(petstore: tuple[str, str, str]) -> None:
    """Without a document nothing lists the methods: the hint and steps do not send the agent
    to ``allowed_values``, which is null."""
    _, _, plain = petstore
    response = httpx.patch(f"{plain}/pet", headers=AUTH, timeout=10)
    error = _error(response)
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


def _empty_required_query(operation: Any, case: Any) -> bool:
    """Whether ``case`` sends a required query parameter with no value: OpenAPI's
    ``allowEmptyValue`` defaults to false (so mend refuses it), Schemathesis does not read it."""
    for param in operation.query:
        value = (case.query or {}).get(param.name)
        values = value if isinstance(value, list) else [value]
        if (
            param.is_required
            and param.definition.get("allowEmptyValue") is not True
            and not any(str(v) for v in values if v is not None)
        ):
            return True
    return False


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


def _generate(
    operation: Any, per_operation: int, each: Any, mode: Any = GenerationMode.POSITIVE
) -> None:
    """``each(case)`` for ``per_operation`` cases Schemathesis generates for ``operation`` (valid
    ones by default)."""

    @given(operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=per_operation,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        if mode is not GenerationMode.POSITIVE or not _empty_required_query(operation, case):
            each(case)

    run()


def _refusals(spec: Spec, path: Path, per_operation: int) -> tuple[int, list[str]]:
    """Schemathesis' valid requests for every operation of ``path``: how many were checked, and
    the ones mend refused."""
    base = "http://upstream" + spec.operations.base_path
    checked: list[str | None] = []
    for result in schemathesis.openapi.from_path(str(path)).get_all_operations():
        operation: Any = result.ok()  # type: ignore[union-attr]  # an Err raises: a test error
        _generate(operation, per_operation, lambda case: checked.append(_refusal(spec, base, case)))
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


def _exchange(case: Any, base: str) -> httpx.Response:
    """``case`` serialised by ``requests``, sent by httpx to ``base`` with a credential."""
    kwargs = case.as_transport_kwargs(base_url=base)
    wanted = ("method", "url", "params", "headers", "json", "data")
    request = requests.Request(**{k: v for k, v in kwargs.items() if k in wanted}).prepare()
    sent: Any = request.body
    written = {
        str(k): v if isinstance(v, str) else v.decode("latin-1") for k, v in request.headers.items()
    }
    headers = {**written, **AUTH}
    return httpx.request(
        str(request.method), str(request.url), headers=headers, content=sent, timeout=5
    )


@pytest.mark.slow  # about 400 exchanges, each sent twice
def test_generated_exchanges_through_mend(petstore: tuple[str, str, str]) -> None:
    """Schemathesis' requests, valid and invalid, sent to Prism directly and through mend: every
    success byte-identical, every error a valid envelope with the upstream's status."""
    upstream, mend, _ = petstore
    counts = {"success": 0, "error": 0}
    for result in schemathesis.openapi.from_path(str(document("petstore"))).get_all_operations():
        operation: Any = result.ok()  # type: ignore[union-attr]  # an Err raises: a test error
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                _generate(operation, 10, lambda case: _compare(case, upstream, mend, counts), mode)
            except Unsatisfiable:  # an operation with nothing to get wrong
                continue
    print(f"Petstore through mend: {counts}")
    assert counts["success"] > 50
    assert counts["error"] > 50


def _compare(case: Any, upstream: str, mend: str, counts: dict[str, int]) -> None:
    try:
        direct = _exchange(case, upstream)
    except httpx.TimeoutException:  # Prism never answers some malformed requests
        counts["unanswered"] = counts.get("unanswered", 0) + 1
        return
    proxied = _exchange(case, mend)
    if direct.status_code < 400:
        counts["success"] += 1
        assert proxied.status_code == direct.status_code
        assert proxied.content == direct.content
    else:
        counts["error"] += 1
        envelope = Envelope.model_validate(proxied.json()["error"])
        assert envelope.upstream_status == direct.status_code


_REQUIRED = re.compile(r"required property '([^']+)'")
_ALLOWED = "must be equal to one of the allowed values: "


def _named_by_prism(response: httpx.Response) -> list[tuple[str, str, list[str] | None]]:
    """(pointer, location, enum) of every violation Prism names (its ``sl-violations`` header,
    else its problem's ``validation[]``), read here as its format says, independently of mend:
    the location list after ``request`` and the location is the pointer, a missing required
    property is under it, and the enum is the one its message lists."""
    header = response.headers.get("sl-violations")
    if header is not None:
        violations = json.loads(header)
    elif response.headers.get("content-type", "").startswith("application/problem+json"):
        violations = response.json().get("validation") or []
    else:
        return []
    out = []
    for violation in violations:
        if not violation.get("location"):  # about the request as a whole (its media type)
            continue
        location = [str(s) for s in violation["location"]]
        if location[:1] == ["request"]:
            location = location[1:]
        if not location:  # the request as a whole
            continue
        where, segments = location[0], location[1:]
        message = violation["message"]
        if violation["code"] == "required" and (found := _REQUIRED.search(message)):
            segments = [*segments, found.group(1)]
        enum = message.split(_ALLOWED, 1)[1].split(", ") if _ALLOWED in message else None
        pointer = "".join("/" + s.replace("~", "~0").replace("/", "~1") for s in segments)
        out.append((pointer, where, enum))
    return out


def _named_by_mend(error: dict[str, Any]) -> list[tuple[str, str, list[str] | None]]:
    out = []
    for field in error["invalid_fields"]:
        enum = (field["allowed_values"] or {}).get("enum")
        out.append((field["field"], field["location"], None if enum is None else enum))
    return out


def _same(prism: tuple[str, str, Any], mend: tuple[str, str, Any]) -> bool:
    """One violation alike: its pointer (a parameter's name regardless of case: Prism says
    ``petid`` for ``petId``), its location, and the enum Prism lists as the one mend offers."""
    pointer, where, enum = prism
    if where != "body":
        pointer, other = pointer.lower(), mend[0].lower()
    else:
        other = mend[0]
    offered = None if mend[2] is None else [str(v) for v in mend[2]]
    return (pointer, where) == (other, mend[1]) and (enum is None or enum == offered)


def _check_pointers(case: Any, upstream: str, mend: str, counts: dict[str, int]) -> None:
    try:
        direct = _exchange(case, upstream)
    except httpx.TimeoutException:  # Prism never answers some malformed requests
        return
    expected = _named_by_prism(direct) if direct.status_code in (400, 422) else []
    if not expected:
        return
    error = _error(_exchange(case, mend))
    got = _named_by_mend(error)
    assert len(got) == len(expected), (case.path, expected, got)
    for prism_says, mend_says in zip(expected, got, strict=True):
        assert _same(prism_says, mend_says), (case.method, case.path, prism_says, mend_says)
        assert error["invalid_fields"][got.index(mend_says)]["documented"] is True
    counts["violations"] += len(expected)
    counts["enums"] += sum(1 for *_, enum in expected if enum is not None)


def _sweep(path: Path, upstream: str, mend: str, wanted: Any, per_operation: int) -> dict[str, int]:
    """Schemathesis' invalid requests for the operations ``wanted`` picks, to Prism directly
    and through mend: every violation Prism names is the envelope's, pointer, location, enum."""
    counts = {"violations": 0, "enums": 0}
    for result in schemathesis.openapi.from_path(str(path)).get_all_operations():
        operation: Any = result.ok()  # type: ignore[union-attr]  # an Err raises: a test error
        if not wanted(operation):
            continue
        try:
            _generate(
                operation,
                per_operation,
                lambda case: _check_pointers(case, upstream, mend, counts),
                GenerationMode.NEGATIVE,
            )
        except Unsatisfiable:  # an operation with nothing to get wrong
            continue
    return counts


@pytest.mark.slow  # about 200 invalid requests, each sent twice
def test_every_pointer_and_enum_prism_names_on_petstore(petstore: tuple[str, str, str]) -> None:
    upstream, mend, _ = petstore
    counts = _sweep(document("petstore"), upstream, mend, lambda op: True, 10)
    print(f"Petstore: {counts}")
    assert counts["violations"] > 20
    assert counts["enums"] > 0


#: GitHub operations with enums and required parameters in the query.
GITHUB_SWEPT = {
    ("GET", "/repos/{owner}/{repo}/issues"),
    ("GET", "/repos/{owner}/{repo}/pulls"),
    ("GET", "/search/labels"),
    ("GET", "/user/repos"),
    ("GET", "/orgs/{org}/repos"),
}


@pytest.mark.slow  # Prism reads GitHub's 13 MB document in about ten seconds
def test_every_pointer_and_enum_prism_names_on_github(github: tuple[str, str, str]) -> None:
    upstream, mend, _ = github
    counts = _sweep(
        document("github"),
        upstream,
        mend,
        lambda op: (op.method.upper(), op.path) in GITHUB_SWEPT,
        15,
    )
    print(f"GitHub: {counts}")
    assert counts["violations"] > 20
    assert counts["enums"] > 5


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
