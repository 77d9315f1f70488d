"""Every operation mend suggests is on the resource the agent addressed (issue 42), on Petstore,
Train Travel and a sample of GitHub's document served by Stoplight Prism: a method a documented
path does not allow (Prism's 405) and a path whose resource is mistyped (Prism's 404), through
``mend run``.

The oracle reads the documents' paths itself: a suggestion is on the resource when each segment
sent is a template parameter of the suggestion's or a literal alike it (``difflib``'s ratio of
0.8, as ``nearest.py`` calls segments alike), and every literal of the documented path the
request was made from is a literal alike in the suggestion at its place (``.../issues`` mistyped
``.../issue``: ``.../issues`` or ``.../issues/{issue_number}``; never ``.../releases``, nor a
template parameter there)."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.policy.openapi.conftest import Served
from tests.policy.openapi.prism_cases import AUTH, error_of
from tests.published.documents import document

#: How alike a sent segment and a documented literal must be to name the same thing.
ALIKE = 0.8
#: GitHub's paths sampled: one in this many, in the document's order.
GITHUB_EVERY = 20
#: Methods tried, in this order, for one a documented path does not allow.
METHODS = ("DELETE", "PUT", "PATCH", "POST", "GET")
#: The HTTP methods of a path item.
DOCUMENTED = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
_PARAMETER = re.compile(r"\{[^}]+\}")


@dataclass(frozen=True)
class Probe:
    """A request made from the documented ``path``: its method and concrete path."""

    path: str  # the documented template
    method: str
    sent: str
    status: int  # what Prism is expected to answer: 405 (the method), 404 (the path)


def _resolved(data: dict[str, Any], node: Any) -> Any:
    while isinstance(node, dict) and isinstance(node.get("$ref"), str):
        target: Any = data
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        node = target
    return node


def _value(data: dict[str, Any], item: dict[str, Any], name: str) -> str:
    """A value for the path parameter ``name`` of the path item ``item``: an integer's ``7``,
    an enum's first value, else a word no documented literal is alike."""
    for method in ("parameters", *DOCUMENTED):
        section = item.get(method)
        declared = section if method == "parameters" else (section or {}).get("parameters")
        for parameter in (_resolved(data, p) for p in declared or []):
            if parameter.get("in") == "path" and parameter.get("name") == name:
                schema = _resolved(data, parameter.get("schema") or {})
                if schema.get("enum"):
                    return str(schema["enum"][0])
                return "7" if schema.get("type") in ("integer", "number") else "zq9"
    return "zq9"


def _segments(path: str) -> list[str]:
    return [s for s in path.split("/") if s]


def _mistyped(literal: str) -> str:
    """An agent's slip on a resource's name: its last letter dropped (``issue`` for ``issues``),
    a short name's doubled (``pett``)."""
    return literal[:-1] if len(literal) > 3 else literal + literal[-1]


def _probes(name: str, every: int = 1) -> Iterator[Probe]:
    data = json.loads(document(name).read_bytes())
    for path, item in list(data["paths"].items())[::every]:
        methods = {m.upper() for m in item if m in DOCUMENTED}
        sent = [
            _value(data, item, s[1:-1]) if _PARAMETER.fullmatch(s) else s for s in _segments(path)
        ]
        concrete = "/" + "/".join(sent)
        missing = [m for m in METHODS if m not in methods]
        if missing:
            yield Probe(path, missing[0], concrete, 405)
        literals = [i for i, s in enumerate(_segments(path)) if not _PARAMETER.search(s)]
        if literals and methods:
            last = literals[-1]
            typo = [*sent[:last], _mistyped(sent[last]), *sent[last + 1 :]]
            yield Probe(path, sorted(methods)[0], "/" + "/".join(typo), 404)


def _alike(sent: str, literal: str) -> bool:
    return difflib.SequenceMatcher(None, sent.lower(), literal.lower()).ratio() >= ALIKE


def on_resource(suggested: str, probe: Probe) -> bool:
    """Whether the documented path ``suggested`` is on the resource ``probe`` addressed."""
    theirs, sent = _segments(suggested), _segments(probe.sent)
    if abs(len(theirs) - len(sent)) > 1:
        return False
    for segment, literal in zip(sent, theirs, strict=False):
        if not _PARAMETER.search(literal) and not _alike(segment, literal):
            return False
    for index, literal in enumerate(_segments(probe.path)):
        if _PARAMETER.search(literal):
            continue
        if index >= len(theirs) or _PARAMETER.search(theirs[index]):
            return False
        if not _alike(theirs[index], literal):
            return False
    return True


def _check(probe: Probe, upstream: str, mend: str, counts: dict[str, int]) -> str | None:
    """``probe`` sent to Prism and through mend: what is wrong with mend's suggestion, or
    ``None``; a probe Prism does not answer as expected (another path fits) is passed over."""
    direct = httpx.request(probe.method, f"{upstream}{probe.sent}", headers=AUTH, timeout=10)
    if direct.status_code != probe.status:
        counts["passed over"] += 1
        return None
    proxied = httpx.request(probe.method, f"{mend}{probe.sent}", headers=AUTH, timeout=10)
    counts[f"{probe.status}s"] += 1
    if proxied.status_code != probe.status:
        return f"{probe.method} {probe.sent}: mend answered {proxied.status_code}"
    found = error_of(proxied)
    suggested = ((found["allowed_values"] or {}).get("operations")) or []
    if found["next_operation"] is None:
        counts["no suggestion"] += 1
        return None if probe.status == 404 else f"{probe.method} {probe.sent}: no suggestion"
    counts["suggested"] += 1
    assert found["next_operation"] == suggested[0]
    wrong = [s for s in suggested if not on_resource(s.split(" ", 1)[1], probe)]
    return f"{probe.method} {probe.sent} ({probe.path}): {wrong}" if wrong else None


def _sweep(served: Served, probes: Iterator[Probe]) -> tuple[dict[str, int], list[str]]:
    upstream, mend, _ = served
    counts = {"405s": 0, "404s": 0, "suggested": 0, "no suggestion": 0, "passed over": 0}
    wrong = [w for p in probes if (w := _check(p, upstream, mend, counts)) is not None]
    return counts, wrong


def test_the_oracle_tells_the_resource_apart() -> None:
    """The test's own reading: the issue's nonsense suggestions are off the resource."""
    issue = Probe("/repos/{owner}/{repo}/issues", "GET", "/repos/o/r/issue", 404)
    assert on_resource("/repos/{owner}/{repo}/issues", issue)
    assert on_resource("/repos/{owner}/{repo}/issues/{issue_number}", issue)
    assert not on_resource("/repos/{owner}/{repo}/releases", issue)
    assert not on_resource("/repos/{owner}/{repo}/{ref}", issue)
    assert not on_resource("/repos/{owner}/{repo}", issue)
    pulls = Probe("/repos/{owner}/{repo}/pulls", "PUT", "/repos/o/r/pulls", 405)
    assert not on_resource("/repos/{owner}/{repo}/pages", pulls)
    repo = Probe("/user/{account_id}", "POST", "/user/repo", 405)
    assert on_resource("/user/repos", repo)


@pytest.mark.slow  # Prism and two mends on each document
@pytest.mark.parametrize("name", ["petstore", "train_travel"])
def test_every_suggestion_is_on_the_addressed_resource(
    name: str, request: pytest.FixtureRequest
) -> None:
    """Each documented path with a method it lacks, and with its last literal mistyped."""
    served: Served = request.getfixturevalue(name)
    counts, wrong = _sweep(served, _probes(name.replace("_", "-")))
    print(f"{name}: {counts}")
    assert counts["405s"] > 3
    assert counts["404s"] > 3
    assert counts["suggested"] > counts["no suggestion"]
    assert wrong == []


@pytest.mark.slow  # Prism reads GitHub's 13 MB document in about ten seconds
def test_every_suggestion_is_on_the_addressed_resource_on_github(github: Served) -> None:
    """One of every ``GITHUB_EVERY`` of GitHub's paths, each probed as on Petstore."""
    counts, wrong = _sweep(github, _probes("github", GITHUB_EVERY))
    print(f"GitHub: {counts}")
    assert counts["405s"] > 20
    assert counts["404s"] > 10
    assert counts["suggested"] > counts["no suggestion"]
    assert wrong == []
