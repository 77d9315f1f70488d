"""Schemathesis' cases sent to Stoplight Prism directly and through ``mend run``, and what Prism
names in its answers read independently of mend: the helpers the published-document tests share
(``test_openapi_published``, ``test_openapi_negative``, ``test_openapi_resource``)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.generation import GenerationMode

from tests.published.documents import document

#: Petstore's operations need a credential; Prism checks only that one is there.
AUTH = {"Authorization": "Bearer agent", "api_key": "agent"}


def rooted(name: str, directory: Path) -> Path:
    """The published document ``name`` written in ``directory`` with ``servers`` naming the
    root: Prism serves the paths there whatever ``servers`` says, as an operator deploying a
    mock would tell mend."""
    published = json.loads(document(name).read_bytes())
    path = directory / f"{name}.json"
    path.write_text(json.dumps({**published, "servers": [{"url": "/"}]}))
    return path


def error_of(response: httpx.Response) -> dict[str, Any]:
    found: dict[str, Any] = response.json()["error"]
    return found


def operations(path: Path, wanted: Callable[[Any], bool] = lambda op: True) -> Iterator[Any]:
    """Schemathesis' operations of the document ``path`` that ``wanted`` picks."""
    for result in schemathesis.openapi.from_path(str(path)).get_all_operations():
        operation: Any = result.ok()  # type: ignore[union-attr]  # an Err raises: a test error
        if wanted(operation):
            yield operation


def empty_required_query(operation: Any, case: Any) -> bool:
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


def generate(
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
        if mode is not GenerationMode.POSITIVE or not empty_required_query(operation, case):
            each(case)

    run()


def generate_negative(operation: Any, per_operation: int, each: Any) -> None:
    """``generate`` in Schemathesis' negative mode; an operation with nothing to get wrong is
    passed over."""
    try:
        generate(operation, per_operation, each, GenerationMode.NEGATIVE)
    except Unsatisfiable:
        return


def exchange(case: Any, base: str) -> httpx.Response:
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


_REQUIRED = re.compile(r"required property '([^']+)'")
_ALLOWED = "must be equal to one of the allowed values: "

Named = tuple[str, str, list[str] | None]


def named_by_prism(response: httpx.Response) -> list[Named]:
    """(pointer, location, enum) of every violation Prism names (its ``sl-violations`` header,
    else its problem's ``validation[]``), read here as its format says, independently of mend:
    the location list after ``request`` and the location is the pointer, a missing required
    property is under it, and the enum is the one its message lists. Nothing when Prism cut its
    list ("Too many violations! ..."): a case it names only in part is not compared."""
    header = response.headers.get("sl-violations")
    if header is not None and not header.startswith("["):
        return []  # "Too many violations! [...": Prism cut its list, so it names only some
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


def named_by_mend(found: dict[str, Any]) -> list[Named]:
    out = []
    for field in found["invalid_fields"]:
        enum = (field["allowed_values"] or {}).get("enum")
        out.append((field["field"], field["location"], None if enum is None else enum))
    return out


def same(prism: Named, mend: Named) -> bool:
    """One violation alike: its pointer (a parameter's name regardless of case: Prism says
    ``petid`` for ``petId``), its location, and the enum Prism lists as the one mend offers."""
    pointer, where, enum = prism
    if where != "body":
        pointer, other = pointer.lower(), mend[0].lower()
    else:
        other = mend[0]
    offered = None if mend[2] is None else [str(v) for v in mend[2]]
    return (pointer, where) == (other, mend[1]) and (enum is None or enum == offered)


def check_pointers(case: Any, upstream: str, mend: str, counts: dict[str, int]) -> None:
    try:
        direct = exchange(case, upstream)
    except httpx.TimeoutException:  # Prism never answers some malformed requests
        return
    expected = named_by_prism(direct) if direct.status_code in (400, 422) else []
    if not expected:
        return
    found = error_of(exchange(case, mend))
    got = named_by_mend(found)
    assert len(got) == len(expected), (case.path, expected, got)
    for prism_says, mend_says in zip(expected, got, strict=True):
        assert same(prism_says, mend_says), (case.method, case.path, prism_says, mend_says)
        assert found["invalid_fields"][got.index(mend_says)]["documented"] is True
    counts["violations"] += len(expected)
    counts["enums"] += sum(1 for *_, enum in expected if enum is not None)


def sweep(
    path: Path, upstream: str, mend: str, wanted: Callable[[Any], bool], per_operation: int
) -> dict[str, int]:
    """Schemathesis' invalid requests for the operations ``wanted`` picks, to Prism directly
    and through mend: every violation Prism names is the envelope's, pointer, location, enum."""
    counts = {"operations": 0, "violations": 0, "enums": 0}
    for operation in operations(path, wanted):
        counts["operations"] += 1
        generate_negative(
            operation, per_operation, lambda case: check_pointers(case, upstream, mend, counts)
        )
    return counts


#: GitHub operations swept in both modes: enums and required parameters in the query, integer
#: path parameters, JSON bodies with required members and enums (``state``, ``merge_method``,
#: ``lock_reason``).
GITHUB_SWEPT = frozenset(
    {
        ("GET", "/repos/{owner}/{repo}/issues"),
        ("GET", "/repos/{owner}/{repo}/pulls"),
        ("GET", "/search/labels"),
        ("GET", "/user/repos"),
        ("GET", "/orgs/{org}/repos"),
        ("GET", "/orgs/{org}/members"),
        ("GET", "/repos/{owner}/{repo}/issues/{issue_number}/comments"),
        ("POST", "/repos/{owner}/{repo}/issues"),
        ("PATCH", "/repos/{owner}/{repo}/issues/{issue_number}"),
        ("PUT", "/repos/{owner}/{repo}/issues/{issue_number}/lock"),
        ("POST", "/repos/{owner}/{repo}/pulls"),
        ("PUT", "/repos/{owner}/{repo}/pulls/{pull_number}/merge"),
    }
)


def github_swept(operation: Any) -> bool:
    """Whether Schemathesis' ``operation`` is one of ``GITHUB_SWEPT``."""
    return (operation.method.upper(), operation.path) in GITHUB_SWEPT
