"""requests' and httpx's own test suites, direct and through mend (bench/client_suites.py).

The slow test runs both suites twice (about five minutes, plus a minute to build their venvs the
first time; ``MEND_CLIENT_SUITES_DIR=DIR`` keeps the sdists and venvs there for the next run) and
fails on any difference that ``bench/client_suites_expected.json`` does not list as intended
(class a) or as the test's own hard-coded address (class c): an unlisted one, or a listed mend
bug (class b) still there. The fast tests keep that list, the doc and the comparison honest.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import client_suites as cs

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "client-suites.md"


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    keep = os.environ.get("MEND_CLIENT_SUITES_DIR")
    workdir = Path(keep) if keep else tmp_path_factory.mktemp("client-suites")
    out = tmp_path_factory.mktemp("client-suites-result") / "result.json"
    cmd = [sys.executable, "-m", "bench.client_suites", "--keep", str(workdir), "--json", str(out)]
    run = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1800, check=False)
    if not out.exists():
        pytest.fail(f"bench.client_suites wrote no results:\n{run.stdout[-3000:]}{run.stderr}")
    data: dict[str, Any] = json.loads(out.read_text())
    return data


@pytest.mark.slow
def test_no_traffic_leaves_loopback(results: dict[str, Any]) -> None:
    for name, result in results["suites"].items():
        assert result["guard"] == [], f"{name}: a test reached for a non-loopback host"


@pytest.mark.slow
def test_every_difference_is_listed(results: dict[str, Any]) -> None:
    """Every test that differs through mend is in the list (a test that is flaky direct too
    says nothing about mend); none is listed for nothing."""
    expected = cs.load_expected()
    for name, result in results["suites"].items():
        differing = {diff["test"] for diff in result["differs"] if diff["kind"] != "flaky"}
        assert differing <= expected[name].keys(), (name, differing - expected[name].keys())
        stale = expected[name].keys() - {diff["test"] for diff in result["differs"]}
        assert not stale, f"{name}: listed but no longer differing, update the list and doc"


@pytest.mark.slow
def test_only_intended_differences(results: dict[str, Any]) -> None:
    """No test differs but those that assert on what mend changes on purpose (class a) or on
    the direct server's address (class c): a class (b) entry is a mend bug still open."""
    expected = cs.load_expected()
    for name, result in results["suites"].items():
        for diff in result["differs"]:
            if diff["kind"] == "flaky":
                continue
            entry = expected[name].get(diff["test"], {"class": "unlisted", "reason": ""})
            assert entry["class"] in cs.ACCEPTED, (name, diff, entry)


# --- fast: the list, the doc, the comparison ------------------------------------------------


def test_expected_list_is_well_formed() -> None:
    expected = cs.load_expected()
    assert expected.keys() == cs.SUITES.keys()
    for tests in expected.values():
        for test, entry in tests.items():
            assert test.startswith("tests/"), test
            assert "::" in test, test
            assert entry["class"] in {"a", "b", "c"}, test
            assert entry["reason"].strip(), test
            assert entry["class"] != "b" or re.fullmatch(r"B\d+", entry["bug"]), test


def test_doc_lists_exactly_the_expected_differences() -> None:
    """docs/client-suites.md has one table row per listed test, with the same class."""
    rows = re.findall(r"^\| `([^`]+)` \| `([^`]+)` \| \(?([abc])\)? \|", DOC.read_text(), re.M)
    documented = {(suite, test): cls for suite, test, cls in rows}
    listed = {
        (suite, test): entry["class"]
        for suite, tests in cs.load_expected().items()
        for test, entry in tests.items()
    }
    assert documented == listed


def test_doc_names_the_pinned_versions() -> None:
    text = DOC.read_text()
    assert f"requests {cs.REQUESTS_VERSION}" in text
    assert f"httpx {cs.HTTPX_VERSION}" in text


def test_junit_classnames_become_node_ids(tmp_path: Path) -> None:
    (tmp_path / "tests" / "client").mkdir(parents=True)
    (tmp_path / "tests" / "client" / "test_a.py").write_text("")
    (tmp_path / "tests" / "test_b.py").write_text("")
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.client.test_a" name="test_x[asyncio]"/>'
        '<testcase classname="tests.test_b.TestK" name="test_y"><failure message="x"/></testcase>'
        '<testcase classname="tests.test_b.TestK" name="test_y"><error message="t"/></testcase>'
        '<testcase classname="tests.test_b" name="test_s"><skipped type="pytest.skip"/></testcase>'
        '<testcase classname="tests.test_b" name="test_f"><skipped type="pytest.xfail"/></testcase>'
        "</testsuite></testsuites>"
    )
    assert cs.parse_junit(junit, tmp_path) == {
        "tests/client/test_a.py::test_x[asyncio]": "passed",
        "tests/test_b.py::TestK::test_y": "error",
        "tests/test_b.py::test_s": "skipped",
        "tests/test_b.py::test_f": "xfailed",
    }


def test_outcomes_are_bucketed_by_passing_or_not() -> None:
    before = {"p": "passed", "f": "failed", "x": "xfailed", "g": "passed"}
    after = {"p": "passed", "f": "error", "x": "xfailed", "g": "failed"}
    direct = cs.Run("s", "direct", before, 0, 0, [])
    mend = cs.Run("s", "mend", after, 0, 0, [])
    buckets, differs, failed = cs.compare(direct, mend)
    assert differs == ["g"]
    assert failed == ["f"]
    assert buckets == {"passed both": 2, "failed both": 1, "differs": 1}
    assert cs.Difference("g", ["passed"] * 3, ["failed", "error", "failed"]).kind == "stable"
    assert cs.Difference("g", ["passed"] * 3, ["failed", "passed", "passed"]).kind == (
        "intermittent"
    )
    assert cs.Difference("g", ["failed", "passed", "passed"], ["failed"] * 3).kind == "flaky"


@pytest.mark.parametrize(
    ("host", "local"),
    [
        ("127.0.0.1", True),
        ("127.5.0.1", True),
        ("::1", True),
        ("localhost", True),
        ("", True),
        (None, True),
        (b"localhost", True),
        ("10.255.255.1", False),
        ("doesnotexist.google.com", False),
        ("fe80::1%eth0", False),
    ],
)
def test_guard_tells_loopback_from_the_world(host: object, local: bool) -> None:
    assert cs._local_host(host) is local
