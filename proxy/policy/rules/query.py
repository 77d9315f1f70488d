"""JMESPath queries over upstream JSON, compiled once into plain Python closures.

Every 4xx and 5xx is asked dozens of rule questions, and ``jmespath``'s tree interpreter spends
most of a rewrite walking its AST with a generic visitor. The shapes rules actually use (field
paths, indexes, ``||``, comparisons, ``type``/``length``/``keys``/``values``, filters such as
``detail[?length(loc) > `1`]`` and pipes) compile here into closures with the interpreter's
exact semantics; anything else (other projections, flattening, most functions) keeps
``jmespath`` itself. Both paths turn a runtime type error, which upstream data can
provoke at will (``length(errors)`` on ``{"errors": 5}``), into ``None``: the question does not
apply to this body, and the next rule gets its turn.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jmespath
import jmespath.exceptions
from jmespath.parser import ParsedResult

Getter = Callable[[Any], Any]


#: AST levels a query may nest (``(((a)))``, ``!!!a``, ``a || b || ...``, ``a | b | ...``). The
#: shipped packs' deepest is 13; every level costs a few stack frames to parse, compile and run.
MAX_DEPTH = 100


class QueryTooDeep(jmespath.exceptions.JMESPathError):
    """A query nested past ``MAX_DEPTH``: refused when it is compiled, not when it is asked."""


class _NotCompiled(Exception):
    """The AST uses a construct this module leaves to ``jmespath``."""


class _TypeMismatch(Exception):
    """A function got an argument of a type JMESPath does not allow."""


def _is_false(value: Any) -> bool:
    # JMESPath's falsiness, not Python's: 0 is true, empty containers and strings are false
    kind = type(value)
    if kind is str or kind is list or kind is dict:  # JSON's own types: empty is false
        return not value
    return value is None or value is False or value in ("", [], {})


#: ``isinstance``'s tuple, made once: ``int | float`` builds a new union at every call
_NUMBERS = (int, float)


def _is_number(value: Any) -> bool:
    kind = type(value)  # JSON's int and float first; bool is an int, and not a number here
    return kind is int or kind is float or (kind is not bool and isinstance(value, _NUMBERS))


def json_equals(left: Any, right: Any) -> bool:
    """JMESPath equality: Python's ``==``, except that 0 and 1 are not false and true."""
    if _is_number(left) and left in (0, 1):
        return not isinstance(right, bool) and left == right
    if _is_number(right) and right in (0, 1):
        return not isinstance(left, bool) and left == right
    return bool(left == right)


def _type_name(value: Any) -> str:
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, _NUMBERS):
        return "number"
    return "null"


def _length(value: Any) -> int:
    if type(value) not in (str, list, dict):
        raise _TypeMismatch
    return len(value)


def _keys(value: Any) -> list[Any]:
    if type(value) is not dict:
        raise _TypeMismatch
    return list(value.keys())


def _values(value: Any) -> list[Any]:
    if type(value) is not dict:
        raise _TypeMismatch
    return list(value.values())


_FUNCTIONS: dict[str, Callable[[Any], Any]] = {
    "type": _type_name,
    "length": _length,
    "keys": _keys,
    "values": _values,
}
_ORDERING: dict[str, Callable[[Any, Any], Any]] = {
    "lt": operator.lt,
    "gt": operator.gt,
    "lte": operator.le,
    "gte": operator.ge,
}


def _field(key: str) -> Getter:
    return lambda value: value.get(key) if type(value) is dict else None


def _index(position: int) -> Getter:
    def get(value: Any) -> Any:
        if type(value) is not list:
            return None
        try:
            return value[position]
        except IndexError:
            return None

    return get


def _chain(steps: list[Getter]) -> Getter:
    if len(steps) == 1:
        return steps[0]
    if len(steps) == 2:
        first, second = steps
        return lambda value: second(first(value))

    def run(value: Any) -> Any:
        for step in steps:
            value = step(value)
        return value

    return run


def _or(left: Getter, right: Getter) -> Getter:
    def get(value: Any) -> Any:
        found = left(value)
        return right(value) if _is_false(found) else found

    return get


def _and(left: Getter, right: Getter) -> Getter:
    def get(value: Any) -> Any:
        found = left(value)
        return found if _is_false(found) else right(value)

    return get


def _not(inner: Getter) -> Getter:
    def get(value: Any) -> Any:
        found = inner(value)
        if _is_number(found) and found == 0:
            return False  # JMESPath: !0 is false, 0 being true
        return not found

    return get


def _comparator(op: str, left: Getter, right: Getter) -> Getter:
    if op == "eq":
        return lambda value: json_equals(left(value), right(value))
    if op == "ne":
        return lambda value: not json_equals(left(value), right(value))
    compare = _ORDERING[op]

    def ordered(value: Any) -> Any:
        a, b = left(value), right(value)
        comparable = (_is_number(a) or isinstance(a, str)) and (_is_number(b) or isinstance(b, str))
        return compare(a, b) if comparable else None

    return ordered


def _function(name: str, args: list[Getter]) -> Getter:
    fn = _FUNCTIONS.get(name)
    if fn is None or len(args) != 1:
        raise _NotCompiled(name)
    (arg,) = args
    return lambda value: fn(arg(value))


def _filter(base: Getter, each: Getter, condition: Getter) -> Getter:
    """``base[?condition].each``: the elements of a list the condition holds for (JMESPath's
    truthiness), each projected, nulls dropped; not a list: null."""

    def get(value: Any) -> Any:
        found = base(value)
        if type(found) is not list:
            return None
        out = []
        for element in found:
            if not _is_false(condition(element)):
                projected = each(element)
                if projected is not None:
                    out.append(projected)
        return out

    return get


def _constant(constant: Any) -> Getter:
    return lambda _: constant


def _identity(value: Any) -> Any:
    return value


def _compiled(children: list[Any]) -> list[Getter]:
    return [_compile(child) for child in children]


def _filter_of(children: list[Any]) -> Getter:
    base, each, condition = _compiled(children)
    return _filter(base, each, condition)


#: How each kind of node compiles, from the node and its children.
_COMPILERS: Mapping[str, Callable[[Mapping[str, Any], list[Any]], Getter]] = {
    "field": lambda node, _: _field(node["value"]),
    "subexpression": lambda _, children: _chain(_compiled(children)),
    "index_expression": lambda _, children: _chain(_compiled(children)),
    "pipe": lambda _, children: _chain(_compiled(children)),
    "current": lambda _, __: _identity,
    "identity": lambda _, __: _identity,
    "literal": lambda node, _: _constant(node["value"]),
    "or_expression": lambda _, children: _or(*_compiled(children[:2])),
    "and_expression": lambda _, children: _and(*_compiled(children[:2])),
    "not_expression": lambda _, children: _not(_compile(children[0])),
    "comparator": lambda node, children: _comparator(node["value"], *_compiled(children[:2])),
    "function_expression": lambda node, children: _function(node["value"], _compiled(children)),
    "filter_projection": lambda _, children: _filter_of(children),
}


def _compile(node: Mapping[str, Any]) -> Getter:
    kind = node["type"]
    children = node.get("children", [])
    if kind == "index" and isinstance(node["value"], int):
        return _index(node["value"])
    compiler = _COMPILERS.get(kind)
    if compiler is None:
        raise _NotCompiled(kind)
    return compiler(node, children)


#: Joins the two keys of a two-level path: ``error.status`` is required as ``"error\x00status"``.
PATH_SEP = "\x00"


def _paths(node: Mapping[str, Any]) -> frozenset[str] | None:
    """Key paths (one or two levels deep) of which one must be present for a non-null result.

    ``error.status`` is null unless the body's ``error`` is an object with a ``status`` key, so it
    needs ``error\x00status``; ``errors[0].field`` needs ``errors``. None when nothing is certain.
    """
    kind = node["type"]
    children = node.get("children", [])
    if kind == "field":
        return frozenset([node["value"]])
    if kind == "subexpression":  # a chain: ``a.b[0].c`` is one node with three children
        left, second = children[0], _head_field(children[1])
        if left["type"] == "field" and second is not None:
            return frozenset([left["value"] + PATH_SEP + second])
        return _paths(left)  # null on the left stays null
    if kind in ("index_expression", "and_expression"):
        return _paths(children[0])  # `&&` returns its falsy left
    if kind == "or_expression":
        left_paths, right_paths = _paths(children[0]), _paths(children[1])
        return None if left_paths is None or right_paths is None else left_paths | right_paths
    return None


def _head_field(node: Mapping[str, Any]) -> str | None:
    """The key a chain step reads first: ``b`` for ``b`` and for ``b[0]``."""
    if node["type"] == "field":
        return str(node["value"])
    if node["type"] == "index_expression":
        return _head_field(node["children"][0])
    return None


def present_paths(document: Any) -> frozenset[str]:
    """The one- and two-level key paths ``document`` has, spelled as ``Query.paths`` spells them."""
    if not isinstance(document, dict):
        return frozenset()
    found = set(document)
    for key, value in document.items():
        if isinstance(value, dict):
            found.update(key + PATH_SEP + sub for sub in value)
    return frozenset(found)


@dataclass(frozen=True, slots=True)
class Query:
    """One compiled JMESPath expression; ``search`` never raises on any JSON value."""

    expression: str
    _get: Getter
    native: bool
    #: the query is null on any JSON body that has none of these key paths (None: no such set)
    paths: frozenset[str] | None = None

    def search(self, document: Any) -> Any:
        try:
            return self._get(document)
        except (_TypeMismatch, jmespath.exceptions.JMESPathError, TypeError, RecursionError):
            # RecursionError: a JSON body deep enough that comparing or printing it
            # (``a == b``, ``to_string(@)``) runs out of stack. Not an answer: no match.
            return None


def _inside(node: Any, ast: bool) -> tuple[list[Any], bool]:
    """What nests one level inside ``node``, and whether that is AST (else a literal's JSON)."""
    if ast and node["type"] == "literal":
        return [node["value"]], False
    if ast:
        return [child for child in node.get("children", []) if isinstance(child, dict)], True
    return list(node.values() if isinstance(node, dict) else node), False


def _depth(tree: Mapping[str, Any]) -> int:
    """How deeply ``tree`` nests, a literal's JSON included; walked without recursion.

    Stops looking once past ``MAX_DEPTH``: the answer is then only "too deep".
    """
    deepest = 0
    stack: list[tuple[Any, int, bool]] = [(tree, 1, True)]
    while stack and deepest <= MAX_DEPTH:
        node, depth, ast = stack.pop()
        deepest = max(deepest, depth)
        inner, inner_ast = _inside(node, ast)
        stack.extend(
            (child, depth + 1, inner_ast) for child in inner if isinstance(child, dict | list)
        )
    return deepest


def _parse(expression: str) -> ParsedResult:
    """``jmespath.compile``, refusing what nests past ``MAX_DEPTH``.

    ``jmespath``'s parser recurses once per level of ``(``, ``[``, ``{``, ``!``, projections and
    ``json`` literals, so thousands of them end in a ``RecursionError``; left-nested chains
    (``a || b || ...``, ``a | b | ...``) parse in a loop but would recurse when compiled below and
    when evaluated. Both are translated to ``QueryTooDeep``, a ``JMESPathError``.
    """
    too_deep = f"the query nests deeper than {MAX_DEPTH} levels"
    try:
        parsed = jmespath.compile(expression)
    except RecursionError as exc:
        raise QueryTooDeep(too_deep) from exc
    if _depth(parsed.parsed) > MAX_DEPTH:
        raise QueryTooDeep(too_deep)
    return parsed


def compile_query(expression: str) -> Query:
    """Raises ``jmespath.exceptions.JMESPathError`` for a query that does not parse or nests past
    ``MAX_DEPTH`` (``QueryTooDeep``)."""
    parsed = _parse(expression)
    paths = _paths(parsed.parsed)
    try:
        return Query(expression, _compile(parsed.parsed), native=True, paths=paths)
    except _NotCompiled:
        return Query(expression, parsed.search, native=False, paths=paths)
