"""Loading an OpenAPI document: YAML or JSON, 3.0 or 3.1, checked against the specification.

A JSON document is parsed by orjson, a YAML one by the bounded YAML loader; both are bounded by
``MAX_DOCUMENT_BYTES`` and ``MAX_DOCUMENT_NODES`` (their own bounds, far above the rule files':
GitHub's REST description is 13 MB and about 476,000 nodes). At load the document is checked
against the specification's JSON Schema (``openapi-spec-validator``'s, run by jsonschema-rs:
milliseconds for GitHub's) and every ``$ref`` must resolve; ``thorough`` adds
``openapi-spec-validator``'s walk of every schema and operation (12 s for GitHub's), which
``mend check --openapi`` runs.

A problem is a ``file:line: message`` line (``RuleError``), as for rule files, so a bad document
stops ``mend run`` and never replaces a good one on reload. Only local ``$ref``s (``#/...``) are
followed: a document names no file or URL mend would read or fetch at load.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from proxy.config.yamlfile import MAX_YAML_DEPTH, Lines, RuleError, parse_yaml
from proxy.policy.shorten import shortened

if TYPE_CHECKING:  # referencing is imported by what loads a document: a mend without one skips it
    from referencing import Registry

#: The document's own URI inside the schema registry: every ``#/...`` is relative to it.
BASE_URI = "urn:mend:openapi"
#: ``$ref`` hops followed for one schema before it is called a cycle.
MAX_REF_HOPS = 32
#: Problems reported per document (a broken generated document can have thousands).
_MAX_PROBLEMS = 20
_MISSING: Any = object()
#: Bytes of a document mend reads (GitHub's REST description is 13 MB).
MAX_DOCUMENT_BYTES = 64 << 20
#: Nodes (keys, values, items; YAML aliases counted as copies) of a document mend reads
#: (GitHub's has about 476,000; a YAML document's nodes each cost a line-map entry too).
MAX_DOCUMENT_NODES = 2_000_000
#: A JSON token, or a line break (``json_lines``); strings cannot hold a raw line break.
_JSON_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\],\n]')


@dataclass(frozen=True, slots=True)
class Document:
    """A checked document: its data, its version and a registry resolving its ``$ref``s."""

    source: str
    data: Mapping[str, Any]
    version: str  # "3.0" or "3.1"
    registry: Registry[Any]
    #: every distinct local ``$ref`` the document holds
    refs: frozenset[str] = frozenset()
    #: what each ``$ref`` names, found once (the document never changes; refs were all checked)
    _targets: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def deref(self, schema: Any) -> Any:
        """``schema`` with its ``$ref`` chain followed (siblings of a 3.1 ``$ref`` dropped)."""
        for _ in range(MAX_REF_HOPS):
            if not isinstance(schema, Mapping) or not isinstance(schema.get("$ref"), str):
                return schema
            ref = schema["$ref"]
            target = self._targets.get(ref, _MISSING)
            if target is _MISSING:
                target = self._targets[ref] = self._lookup(ref)
            schema = target
        return {}

    def _lookup(self, ref: str) -> Any:
        return self.registry.resolver().lookup(BASE_URI + ref).contents


#: Where a problem is: the line of a path into the document (``Lines``, or a function that finds
#: the lines of the paths asked, for a JSON document, whose lines are only read on a problem).
LineSource = Lines | Callable[[Collection[tuple[Any, ...]]], Lines]


def load_document(path: Path, thorough: bool = False) -> Document:
    """Read, parse and check ``path``; ``RuleError`` with ``file:line`` problems."""
    name = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise RuleError([f"{name}:1: cannot read OpenAPI document: {exc.strerror or exc}"]) from exc
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise RuleError([f"{name}:1: OpenAPI document over {MAX_DOCUMENT_BYTES} bytes"])
    if raw.lstrip()[:1] == b"{":
        data = _parse_json(raw, name)
        return check_document(data, lambda wanted: json_lines(raw, wanted), name, thorough)
    text = raw.decode("utf-8", errors="replace")
    data, lines = parse_yaml(text, name, max_nodes=MAX_DOCUMENT_NODES)
    return check_document(data, lines, name, thorough)


def _parse_json(raw: bytes, name: str) -> Any:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        line = raw.count(b"\n", 0, max(exc.pos, 0)) + 1
        raise RuleError([f"{name}:{line}: JSON: {exc.msg}"]) from exc
    problem = _past_bounds(data)
    if problem is not None:
        raise RuleError([f"{name}:1: JSON: the document goes {problem}"])
    return data


def _past_bounds(data: Any) -> str | None:
    """What bound the parsed document goes past (nodes, nesting), or ``None``."""
    count = 0
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_DOCUMENT_NODES:
            return f"past {MAX_DOCUMENT_NODES} nodes"
        if depth > MAX_YAML_DEPTH:
            return f"deeper than {MAX_YAML_DEPTH} levels"
        if isinstance(node, dict):
            count += len(node)  # the keys
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    return None


def json_lines(raw: bytes, wanted: Collection[tuple[Any, ...]]) -> Lines:
    """The line of each path in ``wanted`` (and of its ancestors) in the JSON text ``raw``: one
    pass over its tokens, run only when a problem has to be placed."""
    prefixes = {w[:i] for w in wanted for i in range(len(w) + 1)}
    lines: Lines = {(): 1}
    line = 1
    # per open container: its path, whether it is an object, the current key or index, and
    # whether the next string is a key
    stack: list[list[Any]] = []
    for token in _JSON_TOKEN.finditer(raw):
        text = token.group()
        if text == b"\n":
            line += 1
            continue
        top = stack[-1] if stack else None
        if text[:1] == b'"':
            if top is not None and top[1] and top[3]:
                top[2], top[3] = orjson.loads(text), False
                path = (*top[0], top[2])
                if path in prefixes:
                    lines[path] = line
        elif text in (b"{", b"["):
            path = () if top is None else (*top[0], top[2])
            if path in prefixes:
                lines.setdefault(path, line)
            stack.append([path, text == b"{", None if text == b"{" else 0, True])
        elif text in (b"}", b"]"):
            if stack:
                stack.pop()
        elif top is not None:  # a comma
            if top[1]:
                top[3] = True
            else:
                top[2] += 1
    return lines


def check_document(data: Any, lines: LineSource, name: str, thorough: bool = False) -> Document:
    """``data`` checked: against the specification's schema, its ``$ref``s, and with
    ``thorough`` every schema and operation (``openapi-spec-validator``)."""
    from referencing import Registry, Resource  # noqa: PLC0415 - see TYPE_CHECKING above
    from referencing.jsonschema import DRAFT4, DRAFT202012  # noqa: PLC0415

    if not isinstance(data, Mapping):
        raise RuleError([f"{name}:1: an OpenAPI document is a mapping (openapi:, info:, paths:)"])
    version = str(data.get("openapi", ""))
    if version.startswith("3.0"):
        spec = DRAFT4
    elif version.startswith("3.1"):
        spec = DRAFT202012
    else:
        line = _where(lines, [("openapi",)])[("openapi",)]
        raise RuleError([f"{name}:{line}: openapi: {version or '(missing)'}: give 3.0.x or 3.1.x"])
    refs = list(_refs(data, ()))
    external = [(p, r) for p, r in refs if not r.startswith("#")][:_MAX_PROBLEMS]
    if external:
        where = _where(lines, [p for p, _ in external])
        message = "only local #/... refs are followed"
        raise RuleError([f"{name}:{where[p]}: $ref {r!r}: {message}" for p, r in external])
    resource: Resource[Any] = spec.create_resource(data)
    registry: Registry[Any] = Registry().with_resource(BASE_URI, resource)
    document = Document(name, data, version[:3], registry, frozenset(r for _, r in refs))
    found = _schema_problems(data, version[:3], thorough)
    found.extend(_dangling(document, refs))
    if found:
        where = _where(lines, [p for p, _ in found])
        problems: list[str] = []
        for path, message in found:
            problem = f"{name}:{where[path]}: {message}"
            if problem not in problems:
                problems.append(problem)
        raise RuleError(problems[:_MAX_PROBLEMS])
    return document


def _where(lines: LineSource, paths: Collection[tuple[Any, ...]]) -> dict[tuple[Any, ...], int]:
    known = lines(paths) if callable(lines) else lines
    return {path: _line(path, known) for path in paths}


def _schema_problems(data: Any, version: str, thorough: bool) -> list[tuple[tuple[Any, ...], str]]:
    """The document against the specification's JSON Schema; with ``thorough``, the reference
    validator's walk of every schema and operation besides."""
    # imported here: a mend without documents does not pay for the validator at start-up
    from openapi_spec_validator import (  # noqa: PLC0415
        OpenAPIV30SpecValidator,
        OpenAPIV31SpecValidator,
    )
    from openapi_spec_validator.schemas import (  # noqa: PLC0415
        openapi_v30_schema_validator,
        openapi_v31_schema_validator,
    )
    from referencing.exceptions import Unresolvable  # noqa: PLC0415

    found: list[tuple[tuple[Any, ...], str]] = []
    try:
        if thorough:
            cls: Any = OpenAPIV30SpecValidator if version == "3.0" else OpenAPIV31SpecValidator
            errors: Iterator[Any] = cls(data).iter_errors()
        else:
            schema: Any = (
                openapi_v30_schema_validator if version == "3.0" else openapi_v31_schema_validator
            )
            errors = schema.iter_errors(data)
        for error in errors:
            found.append((tuple(error.absolute_path), _short(error.message)))
            if len(found) == _MAX_PROBLEMS:
                break
    except Unresolvable as exc:
        found.append(((), f"unresolvable $ref: {_short(str(exc))}"))
    except RecursionError as exc:
        found.append(((), f"OpenAPI document nested too deep ({type(exc).__name__})"))
    except Exception as exc:
        # (``paths: 7`` is a KeyError in its keyword pass): after its schema errors, if any
        if not found:
            found.append(((), f"not a valid OpenAPI document ({type(exc).__name__})"))
    return found


def _dangling(
    document: Document, refs: list[tuple[tuple[Any, ...], str]]
) -> list[tuple[tuple[Any, ...], str]]:
    """Each ``$ref`` that names nothing in the document (each distinct one looked up once)."""
    from referencing.exceptions import Unresolvable  # noqa: PLC0415

    out: list[tuple[tuple[Any, ...], str]] = []
    seen: set[str] = set()
    for path, ref in refs:
        if ref in seen:
            continue
        seen.add(ref)
        try:
            document.deref({"$ref": ref})
        except Unresolvable:
            out.append((path, f"unresolvable $ref {ref!r}"))
            if len(out) == _MAX_PROBLEMS:
                break
    return out


def _refs(node: Any, path: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], str]]:
    stack = [(node, path)]
    while stack:
        node, path = stack.pop()
        if isinstance(node, Mapping):
            ref = node.get("$ref")
            if isinstance(ref, str):
                yield (*path, "$ref"), ref
            stack.extend((v, (*path, k)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, (*path, i)) for i, v in enumerate(node))


def _line(path: tuple[Any, ...], lines: Lines) -> int:
    while path and path not in lines:
        path = path[:-1]
    return lines.get(path, 1)


def _short(message: str, limit: int = 300) -> str:
    # with jsonschema-rs installed the validator appends the schema path and the whole instance
    message = " ".join(message.split()).split(" Failed validating ", 1)[0]
    return shortened(message, limit)
