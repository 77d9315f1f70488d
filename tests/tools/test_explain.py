"""``mend explain``: the matching rule, why earlier rules failed, the variables, the envelope."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.tools.cli import main

SPRING_500 = json.dumps(
    {
        "timestamp": "2024-01-01T00:00:00Z",
        "status": 500,
        "error": "Internal Server Error",
        "path": "/api/orders",
        "message": "boom",
    }
)
FASTAPI_422 = json.dumps({"detail": [{"loc": ["body", "qty"], "msg": "too small", "input": -1}]})


def explain(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["explain", *args])
    return code, capsys.readouterr().out


def explain_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code, out = explain(capsys, *args, "--json")
    assert code == 0
    report: dict[str, Any] = json.loads(out)
    return report


def test_text_names_the_match_the_earlier_failures_and_the_envelope(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A Spring 500 passes the database rule (its failing predicate shown) to spring.error."""
    code, out = explain(
        capsys,
        "--status", "500",
        "--header", "Content-Type: application/json",
        "--body", SPRING_500,
        "--method", "POST",
        "--path", "/api/orders",
    )  # fmt: skip
    assert code == 0
    lines = out.splitlines()
    database = next(line for line in lines if "spring.database_unavailable" in line)
    assert database.split()[0] == "no"
    assert "failed: body ~ /" in database
    assert next(line for line in lines if "spring.error" in line).split()[0] == "MATCH"
    assert any(line.startswith("matched: spring.error at ") for line in lines)
    envelope = json.loads(out[out.index("envelope:\n") + len("envelope:\n") :])
    assert envelope["error"]["rule"] == "spring.error"
    assert envelope["error"]["upstream_status"] == 500


def test_rules_for_other_statuses_are_counted_not_listed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without --all the rules that cannot match the status are one count; --all lists them."""
    args = ("--status", "503", "--body", "<html><title>503</title></html>")
    _, short = explain(capsys, *args)
    _, full = explain(capsys, *args, "--all")
    assert "rules skipped: they do not match status 503; --all lists them" in short
    assert "fastapi.validation" not in short
    assert "skip" in full
    assert "fastapi.validation" in full


@pytest.mark.parametrize(
    ("args", "rule", "found"),
    [
        (
            (
                "--status",
                "422",
                "--header",
                "Content-Type: application/json",
                "--body",
                FASTAPI_422,
            ),
            "fastapi.validation",
            {"loc": ["body", "qty"], "msg": "too small", "count": 1},
        ),
        (("--status", "418", "--body", "short and stout"), "fallback.4xx", {}),
    ],
)
def test_json_report_has_the_match_and_its_variables(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], rule: str, found: dict[str, Any]
) -> None:
    """--json gives the matched rule, what it found, and the envelope as data."""
    report = explain_json(capsys, *args)
    assert report["outcome"] == "envelope"
    assert report["matched"]["rule"] == rule
    assert report["matched"]["found"] == found
    assert report["envelope"]["error"]["rule"] == rule
    assert report["verdicts"][-1] == {
        "rule": rule,
        "source": report["matched"]["source"],
        "matched": True,
        "applies": True,
        "reason": "every condition held",
    }


def test_a_2xx_passes_through(capsys: pytest.CaptureFixture[str]) -> None:
    """A success no rule claims passes through, and the report says so."""
    report = explain_json(capsys, "--status", "200", "--body", '{"ok": true}')
    assert (report["outcome"], report["matched"], report["envelope"]) == ("passthrough", None, None)


def test_body_file_extension_sets_the_content_type(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--body-file x.json is read as application/json, as the upstream would have sent it."""
    body = tmp_path / "422.json"
    body.write_text(FASTAPI_422)
    report = explain_json(capsys, "--status", "422", "--body-file", str(body))
    assert report["response"]["content_type"] == "application/json"
    assert report["matched"]["rule"] == "fastapi.validation"


def test_request_headers_and_extra_rules_take_part(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--rules loads an operator file first; its request_headers matcher sees --request-header."""
    rules = tmp_path / "agents.yaml"
    rules.write_text(
        "rules:\n"
        "  - id: agents.quota\n"
        "    when: {status: 429, request_headers: {x-client: '^(?P<client>agent-\\w+)'}}\n"
        "    envelope:\n"
        "      {code: AGENT_QUOTA, category: rate_limit, message: 'Quota of {{ client }}.'}\n"
    )
    args = ("--status", "429", "--rules", str(rules))
    without = explain_json(capsys, *args)
    with_header = explain_json(capsys, *args, "--request-header", "X-Client: agent-7")
    assert without["verdicts"][0]["reason"].startswith("failed: request_headers.x-client")
    assert with_header["matched"]["found"] == {"client": "agent-7"}
    assert with_header["envelope"]["error"]["message"] == "Quota of agent-7."


def test_config_routes_pick_the_rules_by_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --config the route whose prefix fits --path is explained, with its own rules."""
    (tmp_path / "billing.yaml").write_text(
        "rules:\n  - id: billing.teapot\n    when: {status: 418}\n"
        "    envelope: {code: BILLING_TEAPOT, category: validation}\n"
    )
    (tmp_path / "mend.yaml").write_text(
        "routes:\n"
        "  - {name: main, prefix: /, upstream: 'http://127.0.0.1:9'}\n"
        "  - {name: billing, prefix: /billing, upstream: 'http://127.0.0.1:9',"
        " rules: [billing.yaml]}\n"
    )
    config = ("--config", str(tmp_path / "mend.yaml"), "--status", "418")
    billing = explain_json(capsys, *config, "--path", "/billing/x")
    main_route = explain_json(capsys, *config, "--path", "/orders")
    assert (billing["route"], billing["matched"]["rule"]) == ("billing", "billing.teapot")
    assert (main_route["route"], main_route["matched"]["rule"]) == ("main", "fallback.4xx")


@pytest.mark.parametrize(
    "args",
    [
        ("--status", "700"),
        ("--status", "500", "--header", "no colon"),
        ("--status", "500", "--rules", "/nonexistent/rules.yaml"),
        ("--status", "500", "--route", "nope"),
    ],
)
def test_bad_input_is_an_error_not_a_traceback(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    """Bad flags and missing files exit with status 2 and a message on stderr."""
    with pytest.raises(SystemExit) as exited:
        raise SystemExit(main(["explain", *args]))
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip()


GRAPHQL_200 = json.dumps(
    {
        "data": {"me": {"name": "Ada"}, "orders": None},
        "errors": [
            {"message": "You must be logged in", "path": ["orders"]},
            {"message": "boom", "path": ["billing"], "extensions": {"stacktrace": ["at x.js:1"]}},
        ],
    }
)


def test_a_graphql_exchange_is_explained_error_by_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With --protocol, each errors[] entry has its own verdicts, and the GraphQL answer the
    agent gets closes the report."""
    args = ["--status", "200", "--body", GRAPHQL_200, "--method", "POST", "--path", "/graphql"]
    report = explain_json(capsys, *args, "--protocol", "graphql")
    assert report["protocol"] == "graphql"
    assert [u["matched"]["rule"] for u in report["units"]] == [
        "graphql.unauthenticated",
        "graphql.field_error",
    ]
    assert report["answer"]["data"] == {"me": {"name": "Ada"}, "orders": None}
    assert "stacktrace" not in json.dumps(report["answer"])


def test_a_jsonrpc_exchange_answers_with_the_request_id(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--request-body gives the call's id; the text report ends with the JSON-RPC answer."""
    call = '{"jsonrpc": "2.0", "id": 12, "method": "get_order"}'
    code, out = explain(
        capsys,
        *("--status", "502", "--body", "<html><title>502 Bad Gateway</title></html>"),
        *("--method", "POST", "--path", "/rpc", "--protocol", "auto", "--request-body", call),
    )
    assert code == 0
    answer = json.loads(out.split("answer in jsonrpc:\n", 1)[1])
    assert answer["id"] == 12
    assert answer["error"]["code"] == -32603
