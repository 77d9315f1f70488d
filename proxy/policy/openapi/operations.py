"""The operations of a document, and the matcher that finds the one a request calls.

Built once at load as immutable values. A request path matches a template segment by segment;
among templates that fit, the one with literal segments earliest wins (``/users/me`` before
``/users/{id}``), as the OpenAPI specification asks. The document's ``servers`` base path (the
first server's) is stripped before matching.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from proxy.config.yamlfile import RuleError
from proxy.policy.openapi.document import Document
from proxy.policy.regex import Linear, escape, linear

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
#: Operations mend reads from one document.
MAX_OPERATIONS = 5000
#: Path segments a request may have to be matched (longer paths match nothing).
MAX_SEGMENTS = 64


@dataclass(frozen=True, slots=True)
class Parameter:
    name: str
    location: str  # path, query, header, cookie
    required: bool
    schema: Any  # as written (may be a $ref)
    explode: bool
    example: Any = None
    has_example: bool = False
    allow_empty: bool = False  # ``allowEmptyValue`` (query parameters)


@dataclass(frozen=True, slots=True)
class Link:
    """A response's documented link: the operation to call next and its arguments."""

    operation_id: str | None
    operation_ref: str | None
    parameters: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Body:
    required: bool
    media_types: tuple[str, ...]
    schema: Any  # the JSON media type's schema, or None
    example: Any = None
    has_example: bool = False


@dataclass(frozen=True, slots=True)
class Operation:
    id: str
    method: str  # upper case
    path: str  # the template, as documented
    parameters: tuple[Parameter, ...]
    body: Body | None
    #: documented response status ("404", "4XX", "default") -> its links
    links: Mapping[str, tuple[Link, ...]]
    statuses: tuple[str, ...]

    def describe(self) -> dict[str, str]:
        return {"id": self.id, "method": self.method, "path": self.path}


@dataclass(frozen=True, slots=True)
class Template:
    """A path template split into segments: a literal, or a matcher with parameter names."""

    path: str
    literals: tuple[str | None, ...]  # None: a templated segment
    patterns: tuple[tuple[Linear, tuple[str, ...]] | None, ...]
    methods: Mapping[str, Operation]

    @property
    def rank(self) -> tuple[bool, ...]:
        """Literal segments first: the larger rank is the more specific template."""
        return tuple(s is not None for s in self.literals)

    def match(self, segments: list[str]) -> dict[str, str] | None:
        if len(segments) != len(self.literals):
            return None
        params: dict[str, str] = {}
        for segment, literal, pattern in zip(segments, self.literals, self.patterns, strict=True):
            if literal is not None:
                if segment != literal:
                    return None
                continue
            assert pattern is not None
            regex, names = pattern
            found = regex.fullmatch(segment)
            if found is None:
                return None
            for index, name in enumerate(names, start=1):
                params[name] = unquote(found.group(index) or "")
        return params


@dataclass(frozen=True, slots=True)
class PathMatch:
    template: Template
    params: dict[str, str]
    operation: Operation | None  # None: the path is documented, the method is not


@dataclass(frozen=True, slots=True)
class Operations:
    """Every operation of a document, and how to find one for a request."""

    base_path: str  # "" or "/api/v1"
    templates: tuple[Template, ...]
    by_id: Mapping[str, Operation] = field(default_factory=dict)

    @property
    def all(self) -> list[Operation]:
        return [op for t in self.templates for op in t.methods.values()]

    def spec_path(self, upstream_path: str) -> str | None:
        """The path relative to the document's base, or ``None`` when outside it."""
        base = self.base_path
        if not base:
            return upstream_path
        if upstream_path == base or upstream_path.startswith(base + "/"):
            return upstream_path[len(base) :] or "/"
        return None

    def find(self, method: str, spec_path: str) -> PathMatch | None:
        segments = split(spec_path)
        if len(segments) > MAX_SEGMENTS:
            return None
        method = method.upper()
        best: tuple[tuple[bool, ...], bool, Template, dict[str, str]] | None = None
        for template in self.templates:
            if len(template.literals) != len(segments):
                continue
            params = template.match(segments)
            if params is None:
                continue
            # the most literal template; of equally literal ones (``/a/{id}`` and ``/a/{digest}``)
            # the one documenting the method
            key = (template.rank, method in template.methods)
            if best is None or key > best[:2]:
                best = (*key, template, params)
        if best is None:
            return None
        template, params = best[2], best[3]
        return PathMatch(template, params, template.methods.get(method))


def split(path: str) -> list[str]:
    """Raw path segments (still percent-encoded), no leading empty one; ``/`` is ``[""]``."""
    return path.split("/")[1:] if path.startswith("/") else path.split("/")


def _segment_pattern(segment: str, where: str) -> tuple[Linear, tuple[str, ...]]:
    names: list[str] = []
    source, rest = "", segment
    while "{" in rest:
        before, _, after = rest.partition("{")
        name, closed, rest = after.partition("}")
        if not closed or not name:
            raise RuleError([f"{where}: path template segment {segment!r} is malformed"])
        source += escape(before) + "([^/]+)"
        names.append(name)
    return linear(source + escape(rest)), tuple(names)


def _template(path: str, methods: dict[str, Operation], where: str) -> Template:
    literals: list[str | None] = []
    patterns: list[tuple[Linear, tuple[str, ...]] | None] = []
    for segment in split(path):
        if "{" in segment:
            literals.append(None)
            patterns.append(_segment_pattern(segment, where))
        else:
            literals.append(segment)
            patterns.append(None)
    return Template(path, tuple(literals), tuple(patterns), methods)


def _example(holder: Mapping[str, Any], document: Document) -> tuple[Any, bool]:
    """A parameter's or media type's ``example``, or its first ``examples`` value."""
    if "example" in holder:
        return holder["example"], True
    examples = holder.get("examples")
    if isinstance(examples, Mapping):
        for value in examples.values():
            resolved = document.deref(value)
            if isinstance(resolved, Mapping) and "value" in resolved:
                return resolved["value"], True
    return None, False


def _parameters(items: Any, document: Document) -> dict[tuple[str, str], Parameter]:
    out: dict[tuple[str, str], Parameter] = {}
    for written in items if isinstance(items, list) else ():
        item = document.deref(written)
        if not isinstance(item, Mapping):
            continue
        name, location = str(item.get("name", "")), str(item.get("in", ""))
        example, has_example = _example(item, document)
        style_default = location in ("query", "cookie")
        out[(name, location)] = Parameter(
            name=name,
            location=location,
            required=bool(item.get("required", location == "path")),
            schema=item.get("schema", {}),
            explode=bool(item.get("explode", style_default)),
            example=example,
            has_example=has_example,
            allow_empty=item.get("allowEmptyValue") is True,
        )
    return out


def _body(item: Any, document: Document) -> Body | None:
    item = document.deref(item)
    if not isinstance(item, Mapping):
        return None
    content = item.get("content")
    content = content if isinstance(content, Mapping) else {}
    media_types = tuple(str(m).lower() for m in content)
    schema, example, has_example = None, None, False
    for media_type, media in content.items():
        if _is_json(str(media_type)) and isinstance(media, Mapping):
            schema = media.get("schema", {})
            example, has_example = _example(media, document)
            break
    return Body(bool(item.get("required", False)), media_types, schema, example, has_example)


def _is_json(media_type: str) -> bool:
    media_type = media_type.split(";", maxsplit=1)[0].strip().lower()
    return media_type == "application/json" or media_type.endswith("+json")


def _links(responses: Any, document: Document) -> tuple[dict[str, tuple[Link, ...]], list[str]]:
    links: dict[str, tuple[Link, ...]] = {}
    statuses: list[str] = []
    for status, written in responses.items() if isinstance(responses, Mapping) else ():
        statuses.append(str(status))
        response = document.deref(written)
        found = response.get("links") if isinstance(response, Mapping) else None
        if not isinstance(found, Mapping):
            continue
        out = []
        for written_link in found.values():
            link = document.deref(written_link)
            if isinstance(link, Mapping):
                params = link.get("parameters")
                out.append(
                    Link(
                        link.get("operationId"),
                        link.get("operationRef"),
                        params if isinstance(params, Mapping) else {},
                    )
                )
        links[str(status)] = tuple(out)
    return links, statuses


def base_path(data: Mapping[str, Any]) -> str:
    servers = data.get("servers")
    if isinstance(servers, list) and servers and isinstance(servers[0], Mapping):
        url = str(servers[0].get("url", ""))
        return urlsplit(url).path.rstrip("/") if "{" not in url else ""
    return ""


def read_operations(document: Document) -> Operations:
    templates: list[Template] = []
    by_id: dict[str, Operation] = {}
    count = 0
    paths = document.data.get("paths")
    for path, written in paths.items() if isinstance(paths, Mapping) else ():
        item = document.deref(written)
        if not isinstance(item, Mapping):
            continue
        shared = _parameters(item.get("parameters"), document)
        methods: dict[str, Operation] = {}
        for method in METHODS:
            spec = item.get(method)
            if not isinstance(spec, Mapping):
                continue
            count += 1
            if count > MAX_OPERATIONS:
                raise RuleError([f"{document.source}:1: more than {MAX_OPERATIONS} operations"])
            params = {**shared, **_parameters(spec.get("parameters"), document)}
            links, statuses = _links(spec.get("responses"), document)
            op_id = str(spec.get("operationId") or f"{method.upper()} {path}")
            operation = Operation(
                id=op_id,
                method=method.upper(),
                path=str(path),
                parameters=tuple(params.values()),
                body=_body(spec.get("requestBody"), document) if "requestBody" in spec else None,
                links=links,
                statuses=tuple(statuses),
            )
            methods[method.upper()] = operation
            by_id[op_id] = operation
        templates.append(_template(str(path), methods, f"{document.source}:1"))
    return Operations(base_path(document.data), tuple(templates), by_id)
