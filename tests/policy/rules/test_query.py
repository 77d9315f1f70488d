"""proxy.policy.rules.query: compiled JMESPath must answer exactly as the jmespath library does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jmespath
import jmespath.exceptions
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.policy.rules.query import compile_query, present_paths

RULES = Path(__file__).resolve().parents[3] / "rules"

HANDWRITTEN = [
    "a",
    "a.b.c",
    "a[0]",
    "a[-1].b",
    "a.b[0].c || d",
    "a || b || c",
    "a && b",
    "!a",
    "!a && b != `null`",
    "a == `1`",
    "a == `true`",
    "a != 'x'",
    "a < b",
    "a >= `2`",
    "type(a)",
    "length(a)",
    "keys(a)",
    "values(a)[0]",
    "length(keys(@)) > `0`",
    '"quoted-key".x',
    "@",
    "`[1, 2]`",
    "a[*].b",  # projection: left to jmespath
    "a | [0]",
    "a[?b]",
    "a[?b].c",
    "a[?b == `1` && c].d | [0]",
    "length(a[?length(b) > `1`])",
    "detail[?length(loc) > `1`] | [0].msg",
    "detail[?loc == ['body'] && (type == 'missing' || type == 'value_error.missing')]",
    "a[?!b]",
    "a[?@ != `null`]",
    "length(a, b)",  # wrong arity: an error at run time, so None
]


def _queries_in(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [v for k, v in node.items() if k == "query" and isinstance(v, str)]
        return found + [q for v in node.values() for q in _queries_in(v)]
    if isinstance(node, list):
        return [q for v in node for q in _queries_in(v)]
    return []


def _pack_queries() -> list[str]:
    found: set[str] = set()
    for path in RULES.glob("*.yaml"):
        found.update(_queries_in(yaml.safe_load(path.read_text())))
    return sorted(found)


EXPRESSIONS = HANDWRITTEN + _pack_queries()


def _reference(expression: str, document: Any) -> Any:
    try:
        return jmespath.search(expression, document)
    except (jmespath.exceptions.JMESPathError, TypeError):
        return None


def _same(left: Any, right: Any) -> bool:
    # 1 == True in Python; results must agree in type as well as value
    return type(left) is type(right) and left == right


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2) | st.floats(-2, 2) | st.sampled_from(["", "x"]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [*"abcdx", "errors", "detail", "message", "code", "error", "type", "loc", "msg"]
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=12,
)

DOCUMENTS: list[Any] = [
    None,
    5,
    "text",
    [],
    {},
    {"a": {"b": {"c": 1}}, "d": 2},
    {"a": [{"b": 1}, {"b": 2}], "b": 1},
    {"a": 1, "b": True},
    {"a": 0, "b": ""},
    {"a": "x", "b": "y"},
    {"a": [], "b": {}, "c": False},
    {"quoted-key": {"x": "y"}},
    {"errors": 5},
    {"errors": {"qty": ["must be positive"]}, "message": "Invalid"},
    {"detail": [{"loc": ["body", "qty"], "msg": "bad", "type": "value_error"}]},
]


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_agrees_with_jmespath_on_fixed_documents(expression: str) -> None:
    """Every shipped and handwritten query gives jmespath's answer on typical bodies."""
    query = compile_query(expression)
    wrong = [
        (doc, query.search(doc), _reference(expression, doc))
        for doc in DOCUMENTS
        if not _same(query.search(doc), _reference(expression, doc))
    ]
    assert wrong == []


@settings(max_examples=300, deadline=None)
@given(document=_json, expression=st.sampled_from(EXPRESSIONS))
def test_agrees_with_jmespath_on_any_json(document: Any, expression: str) -> None:
    """Random JSON values never make the compiled form and jmespath disagree."""
    assert _same(compile_query(expression).search(document), _reference(expression, document))


@pytest.mark.parametrize(
    ("expression", "document"),
    [
        ("length(errors)", {"errors": 5}),
        ("keys(errors)", {"errors": "x"}),
        ("values(@)", [1]),
        ("length(errors[*].x)", {"errors": 5}),
        ("sort(@)", [1, "a"]),
    ],
)
def test_type_errors_are_none(expression: str, document: Any) -> None:
    """Upstream data that a function cannot take answers None instead of raising."""
    assert compile_query(expression).search(document) is None


@pytest.mark.parametrize(
    ("expression", "native"),
    [
        ("detail[0].loc", True),
        ("errors || error.errors", True),
        ("type(message) == 'string'", True),
        ("length(keys(@)) > `0`", True),
        ("errors[*].field", False),
        ("errors | [0]", True),
        ("detail[?length(loc) > `1`] | [0].msg", True),
        ("errors[?field].message", True),
        ("sort(@)", False),
    ],
)
def test_common_shapes_compile_natively(expression: str, native: bool) -> None:
    """The shapes rules use most skip the tree interpreter; the rest still work through it."""
    assert compile_query(expression).native is native


def test_bad_syntax_raises_at_compile_time() -> None:
    """A query that does not parse fails when rules load, not per request."""
    with pytest.raises(jmespath.exceptions.ParseError):
        compile_query("a[")


@pytest.mark.parametrize(
    ("expression", "paths"),
    [
        ("a", {"a"}),
        ("a.b", {"a\x00b"}),
        ("a.b[0].c", {"a\x00b"}),
        ("a[0].b", {"a"}),
        ("a.b.c", {"a\x00b"}),
        ("a || b.c", {"a", "b\x00c"}),
        ("a && b", {"a"}),
        ("a || type(b)", None),
        ("[0].a", None),
        ("type(a)", None),
        ("a == `1`", None),
    ],
)
def test_paths(expression: str, paths: set[str] | None) -> None:
    """A query names the key paths without which it is null, only when that is certain."""
    got = compile_query(expression).paths
    assert (set(got) if got is not None else None) == paths


@pytest.mark.parametrize(
    ("document", "paths"),
    [
        ({"a": 1, "b": {"c": 2, "d": {"e": 3}}}, {"a", "b", "b\x00c", "b\x00d"}),
        ({"a": [{"b": 1}]}, {"a"}),
        ([{"a": 1}], set()),
        ("text", set()),
    ],
)
def test_present_paths(document: Any, paths: set[str]) -> None:
    """A body offers its top-level keys and the keys of its top-level objects."""
    assert set(present_paths(document)) == paths


@given(_json)
def test_a_query_is_null_on_bodies_without_its_paths(document: Any) -> None:
    """Whenever a query's paths are all absent from a body, the query's result there is null."""
    for expression in ("a.b", "a.b.c", "a.b[0].c", "a[0].b", "a || b.c", "a && b.c"):
        query = compile_query(expression)
        assert query.paths is not None
        if query.paths.isdisjoint(present_paths(document)):
            assert query.search(document) is None, expression
