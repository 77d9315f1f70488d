"""The one YAML loader: operators' YAML, bounded, each node's line kept for ``file:line`` errors."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from proxy.config.known_keys import did_you_mean


class RuleError(ValueError):
    """One or more rule files are invalid; ``problems`` are ``file:line: message`` lines."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = tuple(problems)


Lines = dict[tuple[Any, ...], int]

#: Nodes a document may hold once its aliases are expanded. The largest shipped pack has ~1,100.
MAX_YAML_NODES = 100_000
#: Collections nested in collections. Rule files nest about ten deep; this is far from the stack.
MAX_YAML_DEPTH = 100


class _YamlBound(yaml.MarkedYAMLError):
    """A document past ``MAX_YAML_NODES`` or ``MAX_YAML_DEPTH``, or an alias of its own parent."""

    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem=problem, problem_mark=mark)


class _BoundedComposer(yaml.composer.Composer):
    """PyYAML's composer measuring a document as if its aliases were expanded, before they are.

    Aliases are allowed: operators use anchors to keep configs DRY. What they cannot do is
    multiply: ``b: &b [*a, *a, ...]``, ``c: &c [*b, *b, ...]`` -- "billion laughs", a few hundred
    bytes that expand to gigabytes once constructed -- so the bound is on the expanded size, not
    on aliases. The composer already shares one node per anchor; while it composes, each node adds
    one to a running count and each alias adds the expanded size of its anchored node, measured
    once when that node was composed (the count's growth across it), likewise its height. So the
    measuring is O(nodes in the file), and a bomb stops at the alias that crosses
    ``MAX_YAML_NODES``, named by its line, before anything is expanded.

    Nesting deeper than ``MAX_YAML_DEPTH`` (aliases expanded) is refused too: it would otherwise
    end in a ``RecursionError`` here or in whatever walks the data later. So is an alias of a node
    still being composed (``&a [*a]``), which would expand forever.
    """

    def _bound(self, max_nodes: int) -> None:
        self._max_nodes = max_nodes
        self._expanded = 0  # nodes so far, aliases counted as copies
        self._depth = 0  # of the node being composed; the root is 1
        self._reach = 0  # deepest level reached inside the node being composed
        self._measured: dict[int, tuple[int, int]] = {}  # id(anchored node) -> (size, height)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event: yaml.NodeEvent = self.peek_event()  # type: ignore[attr-defined]
        depth = self._depth + 1
        if isinstance(event, yaml.AliasEvent):
            return self._compose_alias(parent, index, event, depth)
        self._check(depth, self._expanded + 1, event.start_mark, None)
        start, outer = self._expanded, self._reach
        self._expanded, self._depth, self._reach = start + 1, depth, depth
        node = super().compose_node(parent, index)
        height = self._reach - depth
        self._depth, self._reach = depth - 1, max(outer, self._reach)
        if event.anchor is not None and node is not None:
            self._measured[id(node)] = (self._expanded - start, height)
        return node

    def _compose_alias(
        self, parent: yaml.Node | None, index: Any, event: yaml.AliasEvent, depth: int
    ) -> yaml.Node | None:
        node = super().compose_node(parent, index)  # the anchored node, or "undefined alias"
        measured = self._measured.get(id(node))
        if measured is None:
            problem = f"alias *{event.anchor} refers to a node that contains it"
            raise _YamlBound(problem, event.start_mark)
        size, height = measured
        self._check(depth + height, self._expanded + size, event.start_mark, event.anchor)
        self._expanded += size
        self._reach = max(self._reach, depth + height)
        return node

    def _check(self, depth: int, expanded: int, mark: Any, alias: str | None) -> None:
        if depth <= MAX_YAML_DEPTH and expanded <= self._max_nodes:
            return
        past = (
            f"deeper than {MAX_YAML_DEPTH} levels"
            if depth > MAX_YAML_DEPTH
            else f"past {self._max_nodes} nodes"
        )
        if alias is None:
            problem = f"the document goes {past}"
        else:
            problem = f"alias *{alias} takes the document {past} (an alias counts as a copy)"
        raise _YamlBound(problem, mark)


class _BoundedLoader(_BoundedComposer, yaml.SafeLoader):
    """``SafeLoader`` (the pure-Python reader, scanner and parser) with the bounded composer:
    its messages are the ones reported, whichever loader read the file first."""

    def __init__(self, text: str, max_nodes: int = MAX_YAML_NODES) -> None:
        yaml.SafeLoader.__init__(self, text)
        self._bound(max_nodes)


try:
    from yaml._yaml import CParser
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    _BoundedCLoader: Callable[..., _BoundedComposer] | None = None
else:

    class _FastLoader(
        _BoundedComposer, CParser, yaml.constructor.SafeConstructor, yaml.resolver.Resolver
    ):
        """The same composer, constructor and resolver on libyaml's scanner and parser: the same
        nodes with the same lines, for about a fifth of the pure-Python reader's CPU. libyaml's
        own composer (``CSafeLoader``'s) is not used: it checks no bound and recurses in C
        without a limit on depth. A document it refuses is read again by ``_BoundedLoader``."""

        def __init__(self, text: str, max_nodes: int = MAX_YAML_NODES) -> None:
            CParser.__init__(self, text)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
            yaml.composer.Composer.__init__(self)
            self._bound(max_nodes)

    _BoundedCLoader = _FastLoader


def _construct(
    loader: yaml.constructor.SafeConstructor, node: yaml.Node, path: tuple[Any, ...], lines: Lines
) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise yaml.constructor.ConstructorError(
                    None, None, "a mapping key must be a plain value", key_node.start_mark
                )
            key = loader.construct_object(key_node, deep=True)
            out[key] = _construct(loader, value_node, (*path, key), lines)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_construct(loader, item, (*path, i), lines) for i, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)


#: PyYAML contexts whose mark is where the mistake is (an unclosed quote, bracket or brace, a key
#: missing its colon), while the problem's mark is where the parser noticed, often a line later.
_STARTED_AT = ("while scanning", "while parsing a flow")


def _yaml_problem(exc: yaml.YAMLError, name: str) -> str:
    mark = getattr(exc, "problem_mark", None)
    line = mark.line + 1 if mark is not None else 1
    problem = getattr(exc, "problem", None) or str(exc)
    kind = "YAML" if isinstance(exc, _YamlBound) else "YAML syntax"
    context = getattr(exc, "context", None)
    context_mark = getattr(exc, "context_mark", None)
    if context and context_mark is not None and context.startswith(_STARTED_AT):
        started = context_mark.line + 1
        if started != line:
            return f"{name}:{started}: {kind}: {problem} ({context} from here to line {line})"
        return f"{name}:{line}: {kind}: {problem} ({context})"
    return f"{name}:{line}: {kind}: {problem}"


def exhausted(where: str, exc: RecursionError | MemoryError) -> RuleError:
    """Running out of stack or memory while loading ``where`` (``file:line``), as a rule error."""
    what = "nests too deeply" if isinstance(exc, RecursionError) else "is too large to load"
    return RuleError([f"{where}: {what} ({type(exc).__name__})"])


def parse_yaml(text: str, name: str, max_nodes: int = MAX_YAML_NODES) -> tuple[Any, Lines]:
    """Parse YAML keeping each node's line; ``RuleError`` names the file and line on bad syntax.

    Every YAML operators write goes through here (rule files, ``--config``, test cases, recorded
    responses), so every one is bounded by ``_BoundedComposer``; ``max_nodes`` is the bound (API
    documents have their own, ``proxy/policy/openapi/document.py``). libyaml reads it when PyYAML
    has it; a document libyaml refuses is read again by the pure-Python reader, so every message
    and line is the pure-Python loader's.
    """
    try:
        if _BoundedCLoader is not None:  # libyaml reads; what it refuses is read again below
            with contextlib.suppress(yaml.YAMLError):
                return _read(_BoundedCLoader(text, max_nodes))
        return _read(_BoundedLoader(text, max_nodes))
    except yaml.YAMLError as exc:
        raise RuleError([_yaml_problem(exc, name)]) from exc
    except (RecursionError, MemoryError) as exc:
        raise exhausted(f"{name}:1", exc) from exc


def _read(loader: _BoundedComposer) -> tuple[Any, Lines]:
    assert isinstance(loader, yaml.constructor.SafeConstructor)
    try:
        node = loader.get_single_node()
        lines: Lines = {}
        return (None if node is None else _construct(loader, node, (), lines)), lines
    finally:
        loader.dispose()  # type: ignore[attr-defined]


def _line_for(loc: tuple[Any, ...], lines: Lines) -> int:
    # pydantic reports aliases and union branches in loc; walk back until a path we know.
    path = tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p.endswith("]"))))
    path = tuple("json" if p == "json_" else "not" if p == "not_" else p for p in path)
    while path and path not in lines:
        path = path[:-1]
    return lines.get(path, 1)


def validation_problems(
    exc: ValidationError, name: str, lines: Lines, model: type[BaseModel] | None = None
) -> list[str]:
    """``file:line: what is wrong`` for each of ``exc``'s errors; an unknown key of ``model``'s
    (the validated one) names the known key it is nearest to."""
    problems = []
    errors = exc.errors()
    failing = [tuple(error["loc"]) for error in errors]
    for error in errors:
        loc = tuple(error["loc"])
        if error["type"] == "too_short" and any(
            len(other) > len(loc) and other[: len(loc)] == loc for other in failing
        ):
            continue  # "routes: at least 1 item" because its only item failed: not the news
        if error["type"] == "extra_forbidden" and loc:
            known = did_you_mean(model, loc)
            problems.append(f"{name}:{_line_for(loc, lines)}: unknown key {str(loc[-1])!r}{known}")
            continue
        where = ".".join(str(p) for p in loc) or "(top)"
        message = error["msg"].removeprefix("Value error, ")
        problems.append(f"{name}:{_line_for(loc, lines)}: {where}: {message}")
    return problems
