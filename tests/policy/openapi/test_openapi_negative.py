"""Invalid requests, as Schemathesis generates them for Petstore, Train Travel and 12 of GitHub's
operations, against Stoplight Prism directly and through ``mend run --validate-requests``: what
Prism refuses for a violation in what mend checks (the path, the query, a JSON body) mend refuses
too, before the upstream (issue 42: a ``petId`` of the wrong type was forwarded)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.policy.openapi.prism_cases import (
    exchange,
    generate_negative,
    github_swept,
    operations,
    rooted,
)
from tests.published.documents import document, mend_run, prism

#: Where a Prism violation is one mend checks too (its ``sl-violations`` location's second part).
CHECKED = frozenset({"path", "query", "body"})
#: Prism's bound on an integer (JavaScript's ``Number.MAX_SAFE_INTEGER``), not the document's.
JS_SAFE_INTEGER = "9007199254740991"
#: Negative cases per operation: enough to meet each kind of wrong parameter Petstore has.
PER_OPERATION = 12


#: The operations of each document generated for (GitHub's: ``GITHUB_SWEPT``).
WANTED = {"petstore": lambda op: True, "train-travel": lambda op: True, "github": github_swept}


@pytest.fixture(scope="module", params=list(WANTED))
def validating(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, str]]:
    """Prism mocking a published document (``servers`` naming its root; GitHub's has no base
    path), and mend validating before it: the document's name and the two URLs."""
    name: str = request.param
    logs = tmp_path_factory.mktemp("negative")
    path = document(name) if name == "github" else rooted(name, logs)
    with (
        prism(path, logs / "prism.log") as upstream,
        mend_run(
            "--upstream",
            upstream,
            "--openapi",
            str(path),
            "--validate-requests",
            log=logs / "mend.log",
        ) as mend,
    ):
        yield name, upstream, mend


def _checked_violation(response: httpx.Response, media_type: str | None) -> bool:
    """Whether Prism refused the request for something mend checks too: the path, the query,
    a JSON body (mend does not read XML). One refusal of Prism's is not the document's: an
    ``int64`` past JavaScript's safe integers (2^53 - 1), which OpenAPI's ``int64`` allows."""
    if response.status_code not in (400, 422):
        return False
    try:
        violations = json.loads(response.headers.get("sl-violations", "[]"))
    except json.JSONDecodeError:
        return False
    json_body = media_type is not None and "json" in media_type
    return any(
        isinstance(v, dict)
        and isinstance(v.get("location"), list)
        and len(v["location"]) > 1
        and v["location"][1] in CHECKED
        and (v["location"][1] != "body" or json_body)
        and v.get("severity") == "Error"
        and JS_SAFE_INTEGER not in str(v.get("message", ""))
        for v in violations
    )


@pytest.mark.slow  # about 250 exchanges, some sent twice
def test_what_prism_refuses_in_what_mend_checks_mend_refuses_first(
    validating: tuple[str, str, str],
) -> None:
    """Every negative case Prism refuses for its path, query or body is refused by mend with
    ``proxy.request_invalid`` (the upstream never sees it), not forwarded."""
    name, upstream, mend = validating
    forwarded: list[str] = []
    counts = {"refused by prism": 0}

    def each(case: Any) -> None:
        try:
            direct = exchange(case, upstream)
        except httpx.TimeoutException:  # Prism never answers some malformed requests
            return
        if not _checked_violation(direct, case.media_type):
            return
        counts["refused by prism"] += 1
        proxied = exchange(case, mend)
        rule = proxied.json().get("error", {}).get("rule") if proxied.content else None
        if rule != "proxy.request_invalid":
            forwarded.append(
                f"{case.method} {case.formatted_path} {case.query} {case.media_type} "
                f"{case.body!r:.60}: prism "
                f"{direct.headers.get('sl-violations', '')[:200]}; mend {proxied.status_code} "
                f"{rule}"
            )

    for operation in operations(document(name), WANTED[name]):
        generate_negative(operation, PER_OPERATION, each)
    print(f"{name}, negative: {counts}, {len(forwarded)} forwarded")
    assert counts["refused by prism"] > 10
    assert forwarded == []
