"""Loading an OpenAPI document: YAML or JSON, 3.0 or 3.1, checked by ``openapi-spec-validator``.

A problem is a ``file:line: message`` line (``RuleError``), as for rule files, so a bad document
stops ``mend run`` and never replaces a good one on reload. Only local ``$ref``s (``#/...``) are
followed: a document names no file or URL mend would read or fetch at load.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT4, DRAFT202012

from proxy.rulefile import Lines, RuleError, parse_yaml

#: The document's own URI inside the schema registry: every ``#/...`` is relative to it.
BASE_URI = "urn:mend:openapi"
#: ``$ref`` hops followed for one schema before it is called a cycle.
MAX_REF_HOPS = 32
#: Problems reported per document (a broken generated document can have thousands).
_MAX_PROBLEMS = 20
_MISSING: Any = object()
#: Bytes of a document mend reads.
MAX_DOCUMENT_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class Document:
    """A checked document: its data, its version and a registry resolving its ``$ref``s."""

    source: str
    data: Mapping[str, Any]
    version: str  # "3.0" or "3.1"
    registry: Registry[Any]
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


def load_document(path: Path) -> Document:
    """Read, parse and check ``path``; ``RuleError`` with ``file:line`` problems."""
    name = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise RuleError([f"{name}:1: cannot read OpenAPI document: {exc.strerror or exc}"]) from exc
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise RuleError([f"{name}:1: OpenAPI document over {MAX_DOCUMENT_BYTES} bytes"])
    data, lines = parse_yaml(raw.decode("utf-8", errors="replace"), name)
    return check_document(data, lines, name)


def check_document(data: Any, lines: Lines, name: str) -> Document:
    # imported here: a mend without documents does not pay for the validator at start-up
    from openapi_spec_validator import (  # noqa: PLC0415
        OpenAPIV30SpecValidator,
        OpenAPIV31SpecValidator,
    )

    if not isinstance(data, Mapping):
        raise RuleError([f"{name}:1: an OpenAPI document is a mapping (openapi:, info:, paths:)"])
    version = str(data.get("openapi", ""))
    if version.startswith("3.0"):
        validator_cls: Any = OpenAPIV30SpecValidator
        spec = DRAFT4
    elif version.startswith("3.1"):
        validator_cls, spec = OpenAPIV31SpecValidator, DRAFT202012
    else:
        line = lines.get(("openapi",), 1)
        raise RuleError([f"{name}:{line}: openapi: {version or '(missing)'}: give 3.0.x or 3.1.x"])
    external = [
        f"{name}:{lines.get(p, 1)}: $ref {r!r}: only local #/... refs are followed"
        for p, r in _refs(data, ())
        if not r.startswith("#")
    ]
    if external:
        raise RuleError(external[:_MAX_PROBLEMS])
    problems: list[str] = []
    try:
        for error in validator_cls(data).iter_errors():
            where = _line(tuple(error.absolute_path), lines)
            problem = f"{name}:{where}: {_short(error.message)}"
            if problem not in problems:
                problems.append(problem)
            if len(problems) == _MAX_PROBLEMS:
                break
    except Unresolvable as exc:
        problems.append(f"{name}:1: unresolvable $ref: {_short(str(exc))}")
    except RecursionError as exc:
        problems.append(f"{name}:1: OpenAPI document nested too deep ({type(exc).__name__})")
    except Exception as exc:
        # (``paths: 7`` is a KeyError in its keyword pass): after its schema errors, if any
        if not problems:
            problems.append(f"{name}:1: not a valid OpenAPI document ({type(exc).__name__})")
    if problems:
        raise RuleError(problems)
    resource: Resource[Any] = spec.create_resource(data)
    registry: Registry[Any] = Registry().with_resource(BASE_URI, resource)
    return Document(name, data, version[:3], registry)


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
    return message if len(message) <= limit else message[: limit - 1] + "…"
