"""Rule files: the YAML schema, validated once at load, with ``file:line`` errors.

Every check that can fail (regex syntax, JMESPath syntax, template syntax, enum values) runs here,
inside the pydantic validators, so a rule that loads is a rule that compiles. The loader keeps the
line of every YAML node so that a validation error points at the line the operator must edit.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import jmespath.exceptions
import re2
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from proxy.config.sourcefile import read_text
from proxy.policy.envelope import Action, Category, Severity
from proxy.policy.query import Query, compile_query
from proxy.policy.rulecheck import TEMPLATE_FIELDS, never_matching, undefined_variables
from proxy.policy.template import Template, TemplateError

_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
_CODE = re.compile(r"^[A-Z][A-Z0-9_]*$")
_STATUS_CLASS = re.compile(r"^([1-5])xx$")
_STATUS_RANGE = re.compile(r"^(\d{3})-(\d{3})$")


class RuleError(ValueError):
    """One or more rule files are invalid; ``problems`` are ``file:line: message`` lines."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = tuple(problems)


def re2_options() -> Any:
    options = re2.Options()
    options.log_errors = False  # the error is reported once, with file and line, by us
    return options


def compile_regex(pattern: str) -> Any:
    try:
        return re2.compile(pattern, re2_options())
    except re2.error as exc:
        detail = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        raise ValueError(f"bad regex {pattern!r}: {detail}") from exc


def _shown(text: str, limit: int = 80) -> str:
    """``text`` quoted for an error line; a hostile 10 kB query is not echoed whole."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} chars)"


def _first_line(exc: Exception) -> str:
    """jmespath's message without the expression it echoes on further lines (ours quotes it)."""
    return str(exc).split("\n", 1)[0].removesuffix(":").removesuffix(", for expression")


def compile_jmespath(query: str) -> Query:
    try:
        return compile_query(query)
    except jmespath.exceptions.JMESPathError as exc:
        raise ValueError(f"bad JMESPath query {_shown(query)}: {_first_line(exc)}") from exc


def _check_template(value: Any) -> Any:
    if isinstance(value, str):
        try:
            Template.parse(value)
        except TemplateError as exc:
            raise ValueError(str(exc)) from exc
    elif isinstance(value, dict):
        for item in value.values():
            _check_template(item)
    elif isinstance(value, list):
        for item in value:
            _check_template(item)
    return value


def parse_status(spec: int | str) -> frozenset[int]:
    """``422``, ``"4xx"``, ``"500-504"`` -> the set of statuses it names."""
    if isinstance(spec, int) and not isinstance(spec, bool):
        if 100 <= spec <= 599:
            return frozenset({spec})
        raise ValueError(f"status {spec} is not between 100 and 599")
    text = str(spec).strip().lower()
    if text.isdigit():
        return parse_status(int(text))
    if match := _STATUS_CLASS.match(text):
        base = int(match.group(1)) * 100
        return frozenset(range(base, base + 100))
    if match := _STATUS_RANGE.match(text):
        low, high = int(match.group(1)), int(match.group(2))
        if not 100 <= low <= high <= 599:
            raise ValueError(f"status range {spec!r} must lie within 100-599, low to high")
        return frozenset(range(low, high + 1))
    raise ValueError(f"bad status {spec!r}: use 404, '4xx' or '500-504'")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


StatusSpec = int | str | list[int | str]
Regex = Annotated[str, Field(min_length=1)]


class JsonCondition(_Model):
    """A JMESPath query over the JSON body; truthy unless an operator is given."""

    query: str
    equals: Any = None
    one_of: list[Any] | None = None
    matches: str | None = None
    exists: bool | None = None

    @field_validator("query")
    @classmethod
    def _query(cls, value: str) -> str:
        compile_jmespath(value)
        return value

    @field_validator("matches")
    @classmethod
    def _matches(cls, value: str | None) -> str | None:
        if value is not None:
            compile_regex(value)
        return value

    @model_validator(mode="after")
    def _one_operator(self) -> JsonCondition:
        given = [n for n in ("equals", "one_of", "matches", "exists") if n in self.model_fields_set]
        if len(given) > 1:
            raise ValueError(f"give at most one of equals/one_of/matches/exists, got {given}")
        return self


class When(_Model):
    status: StatusSpec | None = None
    method: str | list[str] | None = None
    path: str | list[str] | None = None
    path_regex: str | None = None
    request_headers: dict[str, str | bool] | None = None
    headers: dict[str, str | bool] | None = None
    content_type: str | list[str] | None = None
    body: str | None = None
    json_: list[JsonCondition] | None = Field(default=None, alias="json")
    #: the protocol the agent speaks (proxy/policy/protocols): http, jsonrpc (MCP included), mcp,
    #: graphql
    protocol: str | list[str] | None = None
    #: the MCP tool a ``tools/call`` names, and the JSON-RPC method: names or globs
    tool: str | list[str] | None = None
    rpc_method: str | list[str] | None = None
    all: list[When] | None = None
    any: list[When] | None = None
    not_: When | None = Field(default=None, alias="not")

    @field_validator("protocol")
    @classmethod
    def _protocol(cls, value: str | list[str] | None) -> str | list[str] | None:
        known = ("http", "jsonrpc", "mcp", "graphql")
        for item in [value] if isinstance(value, str) else value or []:
            if item not in known:
                raise ValueError(f"protocol {item!r} is not one of {', '.join(known)}")
        return value

    @field_validator("status")
    @classmethod
    def _status(cls, value: StatusSpec | None) -> StatusSpec | None:
        for item in value if isinstance(value, list) else [value] if value is not None else []:
            parse_status(item)
        return value

    @field_validator("path_regex", "body")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            compile_regex(value)
        return value

    @field_validator("request_headers", "headers")
    @classmethod
    def _header_regexes(cls, value: dict[str, str | bool] | None) -> dict[str, str | bool] | None:
        for pattern in (value or {}).values():
            if isinstance(pattern, str):
                compile_regex(pattern)
            elif pattern is not True:
                raise ValueError("a header matcher is a regex or true (present)")
        return value


class InvalidFieldsSpec(_Model):
    """One invalid field per item of ``each`` (a list, or an object flattened to its leaves)."""

    each: str
    field: str | None = None
    reason: str | None = None
    received: str | None = None
    allowed_values: str | None = None
    strip: tuple[str, ...] = ("body", "query", "path", "header", "cookie", "form")
    #: ASP.NET and Go name C#/Go properties (``Qty``) where the request JSON says ``qty``.
    field_case: Literal["as_is", "camel"] = "as_is"

    @field_validator("each", "field", "reason", "received", "allowed_values")
    @classmethod
    def _queries(cls, value: str | None) -> str | None:
        if value is not None:
            compile_jmespath(value)
        return value


class InvalidFieldTemplate(_Model):
    """One invalid field written out in the rule, for upstreams that only say it in prose."""

    field: str
    reason: str | None = None
    received: Any = None
    allowed_values: Any = None

    @field_validator("field", "reason", "received", "allowed_values")
    @classmethod
    def _templates(cls, value: Any) -> Any:
        return _check_template(value)


class EnvelopeSpec(_Model):
    code: str
    category: Category
    action: Action | None = None
    severity: Severity | None = None
    message: str | None = None
    hint: str | None = None
    steps: list[str] | None = None
    field: str | None = None
    invalid_fields: InvalidFieldsSpec | list[InvalidFieldTemplate] | None = None
    allowed_values: Any = None
    suggested_value: Any = None
    next_operation: str | None = None
    next_operation_args: dict[str, Any] | None = None
    related_codes: list[str] = []
    retry_after_ms: int | str | None = None
    #: keep the upstream's small structured detail as ``upstream_detail``
    #: (proxy/policy/upstream_detail.py)
    upstream_detail: bool = False

    @model_validator(mode="before")
    @classmethod
    def _no_retryable(cls, data: Any) -> Any:
        if isinstance(data, dict) and "retryable" in data:
            raise ValueError(
                "retryable is not set in a rule: it follows from action "
                "(action: retry is retryable, every other action is not)"
            )
        return data

    @field_validator("code")
    @classmethod
    def _code(cls, value: str) -> str:
        if not _CODE.match(value):
            raise ValueError(f"code {value!r} must be SCREAMING_SNAKE_CASE")
        return value

    @field_validator(*TEMPLATE_FIELDS)
    @classmethod
    def _templates(cls, value: Any) -> Any:
        return _check_template(value)


class Docs(_Model):
    """What the error catalog says about a code."""

    cause: str | None = None
    fix: str | None = None
    example: dict[str, Any] | None = None
    stability: str = "stable"


class RuleSpec(_Model):
    id: str
    description: str | None = None
    when: When = When()
    vars: dict[str, str] = {}
    envelope: EnvelopeSpec
    docs: Docs | None = None

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not _ID.match(value):
            raise ValueError(f"rule id {value!r}: use lowercase letters, digits, '.', '_', '-'")
        return value

    @field_validator("vars")
    @classmethod
    def _vars(cls, value: dict[str, str]) -> dict[str, str]:
        for query in value.values():
            compile_jmespath(query)
        return value


class RuleFile(_Model):
    pack: str | None = None
    enabled: bool = True
    rules: list[RuleSpec] = []


@dataclass(frozen=True, slots=True)
class LoadedRule:
    spec: RuleSpec
    pack: str
    source: str  # "file:line", for explain and the catalog


# --- YAML with line numbers, bounded ---------------------------------------------------------

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


def validation_problems(exc: ValidationError, name: str, lines: Lines) -> list[str]:
    problems = []
    errors = exc.errors()
    failing = [tuple(error["loc"]) for error in errors]
    for error in errors:
        loc = tuple(error["loc"])
        if error["type"] == "too_short" and any(
            len(other) > len(loc) and other[: len(loc)] == loc for other in failing
        ):
            continue  # "routes: at least 1 item" because its only item failed: not the news
        where = ".".join(str(p) for p in loc) or "(top)"
        message = error["msg"].removeprefix("Value error, ")
        problems.append(f"{name}:{_line_for(loc, lines)}: {where}: {message}")
    return problems


def load_rule_text(text: str, name: str, default_pack: str) -> list[LoadedRule]:
    data, lines = parse_yaml(text, name)
    if data is None:
        return []
    if isinstance(data, list):  # a bare list of rules is a file too
        data = {"rules": data}
        lines = {(("rules", *k) if k else k): v for k, v in lines.items()}
    try:
        parsed = RuleFile.model_validate(data)
    except ValidationError as exc:
        raise RuleError(validation_problems(exc, name, lines)) from exc
    except (RecursionError, MemoryError) as exc:  # a validator's library ran out
        raise exhausted(f"{name}:1", exc) from exc
    if not parsed.enabled:
        return []
    pack = parsed.pack or default_pack
    loaded = [
        LoadedRule(rule, pack, f"{name}:{lines.get(('rules', i), 1)}")
        for i, rule in enumerate(parsed.rules)
    ]
    problems = [
        f"{rule.source}: {problem}"
        for rule in loaded
        for problem in undefined_variables(rule.spec, pack)
    ]
    if pack != "proxy":  # mend's own failures are chosen by id, never matched
        problems.extend(never_matching(loaded))
    if problems:
        raise RuleError(problems)
    return loaded


def rule_files(paths: Iterable[Path], kind: str = "rule") -> Iterator[Path]:
    """Files named by ``paths``: a directory means its ``*.yaml``/``*.yml`` files, sorted. A
    path that does not exist is a ``RuleError`` naming the ``kind`` of file it should be."""
    for path in paths:
        if path.is_dir():
            yield from sorted(p for p in path.iterdir() if p.suffix in {".yaml", ".yml"})
        elif path.exists():
            yield path
        else:
            raise RuleError([f"{path}:1: no such {kind} file or directory"])


def load_rules(
    paths: Iterable[Path], disabled_packs: Iterable[str] = (), *, max_bytes: int = 8 << 20
) -> list[LoadedRule]:
    """Load and validate every file (each at most ``max_bytes``, ``proxy/config/sourcefile.py``);
    all
    problems of all files are reported together."""

    disabled = set(disabled_packs)
    problems: list[str] = []
    loaded: list[LoadedRule] = []
    seen: dict[str, str] = {}
    try:
        files = list(rule_files(paths))
    except RuleError as exc:
        raise RuleError(exc.problems) from None
    for file in files:
        try:
            text = read_text(file, max_bytes)
            rules = load_rule_text(text, str(file), default_pack=file.stem)
        except RuleError as exc:
            problems.extend(exc.problems)
            continue
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{file}:1: cannot read: {exc}")
            continue
        for rule in rules:
            if rule.pack in disabled:
                continue
            if rule.spec.id in seen:
                first = seen[rule.spec.id]
                problems.append(
                    f"{rule.source}: duplicate rule id {rule.spec.id!r} (first at {first})"
                )
                continue
            seen[rule.spec.id] = rule.source
            loaded.append(rule)
    if problems:
        raise RuleError(problems)
    return loaded
