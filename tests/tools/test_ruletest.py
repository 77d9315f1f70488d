"""``mend test``: rule test cases run through the proxy's own match-and-build path."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from proxy.tools.cli import main
from proxy.tools.ruletest.compare import differences
from proxy.tools.ruletest.loading import load_cases
from proxy.tools.ruletest.runner import run_tests

FASTAPI_422 = """
  - name: fastapi 422 lists every field
    request: {method: POST, path: /api/orders}
    response:
      status: 422
      headers: {Content-Type: application/json}
      json:
        detail:
          - {loc: [body, qty], msg: Input should be greater than 0, input: -1, ctx: {gt: 0}}
          - {loc: [body, sku], msg: Field required, input: null}
    expect:
      rule: fastapi.validation
      code: VALIDATION_FAILED
      invalid_fields: [{field: /qty, received: -1}, {field: /sku}]
"""


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def cases(*items: str) -> str:
    return "cases:\n" + "".join(items)


def test_a_passing_case_reports_one_passed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A case whose expectation holds passes, and the summary says so on its own line."""
    write(tmp_path, "fastapi.yaml", cases(FASTAPI_422))
    assert main(["test", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 passed, 0 failed"


def test_a_failing_case_names_file_line_and_the_differing_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A wrong expectation fails with file:line, the case name and expected vs got per key."""
    wrong = FASTAPI_422.replace("code: VALIDATION_FAILED", "code: BAD_REQUEST")
    file = write(tmp_path, "wrong.yaml", cases(FASTAPI_422, wrong))
    names = [i for i, t in enumerate(file.read_text().splitlines(), 1) if "- name:" in t]
    assert main(["test", str(file)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert f"{file}:{names[1]}: fastapi 422 lists every field" in out
    assert '    code: expected "BAD_REQUEST", got "VALIDATION_FAILED"' in out
    assert out[-1] == "1 passed, 1 failed"


@pytest.mark.parametrize(
    ("expected", "got", "paths"),
    [
        ({"code": "A"}, {"code": "A", "rule": "r"}, []),
        ({"code": "A"}, {"code": "B"}, ["code"]),
        ({"field": None}, {"field": "/x"}, ["field"]),
        ({"retryable": True}, {"retryable": 1}, ["retryable"]),
        ({"retry_after_ms": 1000}, {"retry_after_ms": 1000.0}, []),
        ({"missing": 1}, {}, ["missing"]),
        ({"f": [{"a": 1}]}, {"f": [{"a": 1, "b": 2}]}, []),
        ({"f": [{"a": 1}, {"a": 2}]}, {"f": [{"a": 1}, {"a": 3}]}, ["f[1].a"]),
        ({"f": [{"a": 1}]}, {"f": [{"a": 1}, {"a": 2}]}, ["f (length 1 vs 2)"]),
        ({"o": {"min": 1}}, {"o": {"min": 1, "max": 9}}, []),
        ({"o": {"min": 1}}, {"o": 5}, ["o"]),
    ],
)
def test_expectations_are_subsets(expected: Any, got: Any, paths: list[str]) -> None:
    """Mappings are subsets, lists pair element by element, scalars compare exactly."""
    assert [d.path for d in differences(expected, got)] == paths


@pytest.mark.parametrize(
    ("status", "body", "expect", "ok"),
    [
        (200, '{"ok": true}', "passthrough", True),
        (404, '{"detail": "no"}', "passthrough", False),
        (200, '{"ok": true}', "{code: X}", False),
    ],
)
def test_passthrough_expectations(
    tmp_path: Path, status: int, body: str, expect: str, ok: bool
) -> None:
    """``expect: passthrough`` holds exactly when no rule matches the response."""
    case = f"""
  - name: c
    response: {{status: {status}, body: '{body}'}}
    expect: {expect}
"""
    write(tmp_path, "p.yaml", cases(case))
    assert run_tests([tmp_path]).ok is ok


def test_success_rules_let_a_case_match_a_2xx(tmp_path: Path) -> None:
    """A case's route.success_rules make its 2xx rule take part, as on a real route."""
    write(
        tmp_path,
        "graphql.yaml",
        """
        rules:
          - id: graphql.errors
            when: {status: 200, json: [{query: "errors[0].message"}]}
            envelope: {code: GRAPHQL_ERROR, category: validation}
        """,
    )
    case = """
  - name: graphql 200 with errors
    route: {success_rules: ["graphql.*"]}
    rules: [graphql.yaml]
    response: {status: 200, json: {errors: [{message: boom}]}}
    expect: {rule: graphql.errors, code: GRAPHQL_ERROR}
  - name: without success_rules it passes through
    rules: [graphql.yaml]
    response: {status: 200, json: {errors: [{message: boom}]}}
    expect: passthrough
"""
    tests = tmp_path / "tests"
    tests.mkdir()
    write(tests, "g.yaml", cases(case.replace("[graphql.yaml]", "[../graphql.yaml]")))
    report = run_tests([tests])
    assert (report.passed, report.failed, report.problems) == (2, 0, ())


def test_case_rules_come_before_the_packs(tmp_path: Path) -> None:
    """A case's own rule file wins over the shipped packs for the same response."""
    write(
        tmp_path,
        "mine.yaml",
        """
        rules:
          - id: mine.orders
            when: {status: 422, path: /api/orders}
            envelope: {code: ORDER_INVALID, category: validation}
        """,
    )
    case = """
  - name: my rule first
    rules: [mine.yaml]
    request: {method: POST, path: /api/orders}
    response: {status: 422, json: {detail: [{loc: [body, qty], msg: bad}]}}
    expect: {rule: mine.orders, code: ORDER_INVALID}
"""
    write(tmp_path, "c.yaml", cases(case))
    report = run_tests([tmp_path / "c.yaml"])
    assert (report.passed, report.failed) == (1, 0), report.lines()


@pytest.mark.parametrize(
    ("case", "line", "message"),
    [
        (
            "  - name: x\n    response: {status: 422, json: {}, body: x}\n"
            "    expect: passthrough\n",
            4,
            "not both",
        ),
        (
            "  - name: x\n    response: {status: 422, body: ''}\n    expect: {cod: X}\n",
            5,
            "not envelope fields",
        ),
        (
            "  - name: x\n    response: {status: 99, body: ''}\n    expect: passthrough\n",
            4,
            "status",
        ),
        (
            "  - name: x\n    respnse: {status: 400, body: ''}\n    expect: passthrough\n",
            4,
            "respnse",
        ),
    ],
)
def test_malformed_cases_report_file_and_line(
    tmp_path: Path, case: str, line: int, message: str
) -> None:
    """A malformed case file is reported as file:line with pydantic's reason, and fails the run."""
    file = write(tmp_path, "bad.yaml", "# a comment\ncases:\n" + case)
    loaded, problems = load_cases([file])
    assert loaded == []
    assert any(p.startswith(f"{file}:{line}:") and message in p for p in problems), problems


def test_a_response_with_no_body_needs_no_body_key(tmp_path: Path) -> None:
    """httpbin's empty 401, recorded as ``{status: 401, headers: ...}``, runs as an empty body."""
    case = """
      - name: an empty 401 with a Basic challenge
        response: {status: 401, headers: {WWW-Authenticate: 'Basic realm="Fake Realm"'}}
        expect: {upstream_status: 401, category: auth}
    """
    write(tmp_path, "c.yaml", cases(textwrap.dedent(case)))
    report = run_tests([tmp_path / "c.yaml"])
    assert (report.passed, report.problems) == (1, ())


def test_rule_files_in_the_tests_directory_are_not_cases(tmp_path: Path) -> None:
    """A rule file next to the cases (rules:, no cases:) is skipped when scanning a directory."""
    write(tmp_path, "extra.yaml", "rules: []\n")
    write(tmp_path, "c.yaml", cases(FASTAPI_422))
    report = run_tests([tmp_path])
    assert (report.passed, report.problems) == (1, ())


def test_rules_that_do_not_load_fail_the_case_with_their_problems(tmp_path: Path) -> None:
    """A case whose rule file is invalid fails and shows that file's file:line problem."""
    write(
        tmp_path,
        "broken.yaml",
        "rules:\n  - id: Bad Id\n    envelope: {code: X, category: validation}\n",
    )
    write(
        tmp_path,
        "c.yaml",
        cases(FASTAPI_422.replace("    request:", "    rules: [broken.yaml]\n    request:")),
    )
    write(
        tmp_path,
        "d.yaml",
        cases(FASTAPI_422.replace("    request:", "    rules: [broken.yaml]\n    request:")),
    )
    report = run_tests([tmp_path / "c.yaml", tmp_path / "d.yaml"])
    assert report.failed == 2
    problem = [line for line in report.lines() if f"{tmp_path / 'broken.yaml'}:2:" in line]
    assert len(problem) == 1  # shown once, however many cases need the file


def test_no_default_packs_leaves_only_the_fallbacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--no-default-packs drops the shipped packs: the FastAPI 422 meets only the fallback."""
    write(tmp_path, "c.yaml", cases(FASTAPI_422))
    assert main(["test", "--no-default-packs", str(tmp_path)]) == 1
    assert 'rule: expected "fastapi.validation", got "fallback.422"' in capsys.readouterr().out


def test_extra_rules_option_applies_to_every_case(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--rules adds a rule file in front of the packs for all cases."""
    rules = write(
        tmp_path,
        "teapot.yaml",
        "rules:\n  - id: t.teapot\n    when: {status: 418}\n"
        "    envelope: {code: TEAPOT, category: validation}\n",
    )
    tests = tmp_path / "tests"
    tests.mkdir()
    write(
        tests,
        "c.yaml",
        cases("  - name: t\n    response: {status: 418, body: ''}\n    expect: {code: TEAPOT}\n"),
    )
    assert main(["test", str(tests)]) == 1
    assert main(["test", "--rules", str(rules), str(tests)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 passed, 0 failed"


JSONRPC_CASE = """
  - name: a JSON-RPC error comes back with its id
    protocol: jsonrpc
    request: {method: POST, path: /rpc, json: {jsonrpc: "2.0", id: 4, method: get_order}}
    response:
      status: 200
      json: {jsonrpc: "2.0", id: 4, error: {code: -32601, message: Method not found}}
    expect: {rule: jsonrpc.method_not_found}
    expect_response: {id: 4, error: {code: -32601}}
"""


def test_a_case_can_state_its_protocol_and_the_answer(tmp_path: Path) -> None:
    """A protocol case checks the envelope and the JSON the agent receives in its protocol."""
    write(tmp_path, "rpc.yaml", cases(JSONRPC_CASE))
    assert run_tests([tmp_path]).ok


def test_a_wrong_protocol_answer_is_a_difference(tmp_path: Path) -> None:
    """``expect_response`` is compared as a subset too, under ``response``."""
    write(tmp_path, "rpc.yaml", cases(JSONRPC_CASE.replace("{id: 4, error", "{id: 5, error")))
    report = run_tests([tmp_path])
    assert report.outcomes[0].problems == ("response.id: expected 5, got 4",)
