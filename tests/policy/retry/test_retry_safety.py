"""The tools/list table and the retry_safe overrides: capped, strict about what they trust."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from proxy.config.route import Route
from proxy.config.sources import load_settings
from proxy.config.yamlfile import RuleError
from proxy.policy.exchange import Exchange
from proxy.policy.retry.retry_safety import MAX_BATCH, MAX_LISTED, MAX_NAME, RetrySafety, ToolHints


def _listing(*tools: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "result": {"tools": list(tools)}}


def _call(tool: str | None = None, method: str = "POST", path: str = "/mcp") -> Exchange:
    return Exchange(method, path, "r", "req_1", {}, tool=tool)


def test_table_keeps_at_most_its_cap() -> None:
    """Past its cap the table forgets the tools listed longest ago."""
    table = RetrySafety(max_tools=100)
    for page in range(50):
        table.learn("r", _listing(*({"name": f"t{page}_{i}"} for i in range(100))))
    assert len(table) == 100
    assert table.hints("r", "t49_99") == ToolHints()
    assert table.hints("r", "t0_0") is None


def test_only_boolean_annotations_are_trusted() -> None:
    """An annotation that is not a JSON boolean ("true", 1) says nothing."""
    table = RetrySafety()
    table.learn(
        "r", _listing({"name": "t", "annotations": {"readOnlyHint": "true", "idempotentHint": 1}})
    )
    assert table.hints("r", "t") == ToolHints()
    assert table.verdict(None, _call("t")).safe is None


@pytest.mark.parametrize(
    "entry",
    ["not a tool", {"name": "x" * (MAX_NAME + 1)}, {"name": ""}, {"name": 7}, {"title": "no name"}],
)
def test_entries_that_are_not_tools_are_ignored(entry: Any) -> None:
    """A tools/list entry without a usable name is not remembered."""
    table = RetrySafety()
    table.learn("r", _listing(entry))
    assert len(table) == 0


def test_tables_are_per_route() -> None:
    """A tool listed on one route says nothing of a same-named tool on another."""
    table = RetrySafety()
    table.learn("a", _listing({"name": "t", "annotations": {"readOnlyHint": True}}))
    assert table.verdict(None, Exchange("POST", "/mcp", "a", "q", {}, tool="t")).safe is True
    assert table.verdict(None, Exchange("POST", "/mcp", "b", "q", {}, tool="t")).safe is None


def test_batch_answers_are_read_element_by_element() -> None:
    """A batch holding a tools/list result teaches its tools too."""
    table = RetrySafety()
    table.learn("r", [{"jsonrpc": "2.0", "id": 1, "result": {}}, _listing({"name": "t"})])
    assert table.hints("r", "t") == ToolHints()


def test_operation_override_matches_method_and_path_glob() -> None:
    """An operation entry applies to its method and path glob only; first match wins."""
    route = Route(
        name="r",
        upstream="http://127.0.0.1:9",
        retry_safe=[
            {"operation": "POST /api/search/**", "safe": True},
            {"operation": "POST /api/**", "safe": False},
        ],
    )
    table = RetrySafety()
    assert table.verdict(route, _call(None, "POST", "/api/search/orders")).safe is True
    assert table.verdict(route, _call(None, "POST", "/api/orders")).safe is False
    assert table.verdict(route, _call(None, "PUT", "/api/search/x")).safe is None


def test_bad_override_is_a_config_error_with_file_and_line(tmp_path: Path) -> None:
    """A retry_safe entry naming neither or both targets, or a bad operation, is refused."""
    config = tmp_path / "mend.yaml"
    config.write_text(
        "routes:\n  - name: a\n    upstream: http://127.0.0.1:9\n    retry_safe:\n"
        "      - {operation: 'post /x', safe: true}\n"
    )
    with pytest.raises(RuleError) as raised:
        load_settings(config)
    assert f"{config}:" in str(raised.value)
    assert "METHOD /path" in str(raised.value)


@pytest.mark.parametrize(
    ("sent", "safe"),
    [
        ({"query": "{ orders { id } }"}, True),
        ({"query": "mutation { pay }"}, None),
        ({"extensions": {"persistedQuery": {"sha256Hash": "ab"}}}, None),  # no document to read
        ({"query": 7}, None),
    ],
)
def test_graphql_requests_read_unless_a_mutation_is_in_them(sent: Any, safe: bool | None) -> None:
    """A GraphQL document without a mutation is a read; anything mend cannot read is not."""
    exchange = Exchange("POST", "/graphql", "r", "q", {}, protocol="graphql")
    assert RetrySafety().verdict(None, exchange, sent).safe is safe


def _batch(*calls: tuple[str, str | None]) -> list[dict[str, Any]]:
    return [
        {"jsonrpc": "2.0", "id": n, "method": method, "params": {"name": tool} if tool else {}}
        for n, (method, tool) in enumerate(calls)
    ]


@pytest.mark.parametrize(
    ("calls", "safe"),
    [
        ((("tools/list", None), ("ping", None)), True),
        ((("tools/call", "lookup"), ("resources/read", None)), True),  # lookup: readOnlyHint
        ((("tools/call", "lookup"), ("tools/call", "pay")), None),  # pay: unannotated
        ((("tools/call", "lookup"), ("tools/call", "unknown")), None),  # never listed
    ],
)
def test_an_mcp_batch_is_safe_only_when_every_call_in_it_is(
    calls: tuple[tuple[str, str | None], ...], safe: bool | None
) -> None:
    """A batch is sent again only if each of its calls could be: one unsafe call, or one tool
    mend knows nothing of, makes the whole batch unsafe."""
    table = RetrySafety()
    table.learn("r", _listing({"name": "lookup", "annotations": {"readOnlyHint": True}}))
    table.learn("r", _listing({"name": "pay"}))
    exchange = Exchange("POST", "/mcp", "r", "q", {}, protocol="mcp")
    assert table.verdict(None, exchange, _batch(*calls)).safe is safe


def test_a_batch_of_plain_json_rpc_is_not_known_to_be_safe() -> None:
    """Outside MCP, mend cannot tell what a JSON-RPC method does: a batch is not safe."""
    exchange = Exchange("POST", "/rpc", "r", "q", {}, protocol="jsonrpc")
    assert RetrySafety().verdict(None, exchange, _batch(("tools/list", None))).safe is None


def test_one_answer_is_read_up_to_its_caps() -> None:
    """A huge batch or tools list is read only up to MAX_BATCH elements and MAX_LISTED tools."""
    table = RetrySafety(max_tools=10 * MAX_LISTED)
    table.learn("r", _listing(*({"name": f"t{i}"} for i in range(MAX_LISTED + 5))))
    assert len(table) == MAX_LISTED
    batch = [{"jsonrpc": "2.0", "id": i, "result": {}} for i in range(MAX_BATCH)]
    table.learn("r", [*batch, _listing({"name": "late"})])
    assert table.hints("r", "late") is None
