"""Checking a request against its operation before the upstream sees it.

Every parameter and body schema is compiled once at load (``openapi-schema-validator``: the
``jsonschema`` validators with OpenAPI's 3.0 and 3.1 dialects and format checkers). A check
returns every violation, each with its pointer, reason, what was sent, what is allowed and, where
one can be chosen, a suggestion. Parameters whose serialisation mend does not read (objects,
``deepObject``, ``content``) are not checked: a request is never refused for what mend cannot
read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from proxy import nesting
from proxy.exchange import NOT_JSON
from proxy.openapi import facts
from proxy.openapi.document import BASE_URI, Document
from proxy.openapi.operations import Operation, Operations, Parameter, PathMatch

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator

#: Violations reported for one request (the rest are counted in the last one's reason).
MAX_VIOLATIONS = 50
#: Characters of a received string echoed back; bytes of a received object or array.
_ECHO_CHARS = 256
#: Headers OpenAPI says a parameter may not describe.
_IGNORED_HEADERS = frozenset({"accept", "content-type", "authorization"})


@dataclass(frozen=True, slots=True)
class Violation:
    pointer: str
    location: str  # body, query, path, header
    reason: str
    received: Any
    allowed_values: dict[str, Any] | None
    suggested_value: Any


@dataclass(frozen=True, slots=True)
class _Param:
    spec: Parameter
    validator: Validator | None  # None: not checked (a serialisation mend does not read)
    kind: str | None  # the scalar type values are coerced to
    array_of: str | None  # the item type when the parameter is an array


@dataclass(frozen=True, slots=True)
class CheckedOperation:
    operation: Operation
    params: tuple[_Param, ...]
    body: Validator | None


def _absolute(schema: Any, depth: int = 0) -> Any:
    """A copy of an inline schema whose ``#/...`` refs name the document in the registry."""
    if depth > 64:
        return schema
    if isinstance(schema, Mapping):
        return {
            k: (
                BASE_URI + v
                if k == "$ref" and isinstance(v, str) and v.startswith("#")
                else _absolute(v, depth + 1)
            )
            for k, v in schema.items()
        }
    if isinstance(schema, list):
        return [_absolute(v, depth + 1) for v in schema]
    return schema


class Checker:
    """Compiled validators for every operation of one document."""

    def __init__(self, document: Document, operations: Operations) -> None:
        # imported here: a mend without documents does not pay for them at start-up
        from openapi_schema_validator import (  # noqa: PLC0415
            OAS30WriteValidator,
            OAS31Validator,
            oas30_format_checker,
            oas31_format_checker,
        )

        self.document = document
        if document.version == "3.0":
            self._cls: Any = OAS30WriteValidator
            self._formats = oas30_format_checker
        else:
            self._cls, self._formats = OAS31Validator, oas31_format_checker
        self.operations: dict[tuple[str, str], CheckedOperation] = {
            (op.method, op.path): self._compile(op) for op in operations.all
        }

    def _validator(self, schema: Any) -> Validator:
        validator: Validator = self._cls(
            _absolute(schema), registry=self.document.registry, format_checker=self._formats
        )
        return validator

    def _compile(self, operation: Operation) -> CheckedOperation:
        params = []
        for param in operation.parameters:
            if param.location == "cookie" or (
                param.location == "header" and param.name.lower() in _IGNORED_HEADERS
            ):
                continue
            resolved = facts.combined(param.schema, self.document)
            kind = _scalar(resolved)
            items = facts.combined(resolved.get("items", {}), self.document)
            array_of = _scalar(items) if resolved.get("type") == "array" else None
            readable = kind is not None or (resolved.get("type") == "array" and array_of)
            validator = self._validator(param.schema) if readable else None
            params.append(_Param(param, validator, kind, array_of))
        body = operation.body
        body_validator = (
            self._validator(body.schema) if body is not None and body.schema is not None else None
        )
        return CheckedOperation(operation, tuple(params), body_validator)

    def check(
        self,
        match: PathMatch,
        query: Mapping[str, str] | Any,
        headers: Mapping[str, str] | Any,
        content_type: str,
        body: bytes | None,
    ) -> list[Violation]:
        """Every violation of the operation ``match`` found (none: the request may go); ``body``
        ``None`` is a body not read (too large or content-encoded), ``b""`` no body."""
        assert match.operation is not None
        checked = self.operations[(match.operation.method, match.operation.path)]
        out: list[Violation] = []
        for param in checked.params:
            out.extend(self._param(param, match.params, query, headers))
        out.extend(self._body(checked, content_type, body))
        if len(out) > MAX_VIOLATIONS:
            out = out[:MAX_VIOLATIONS]
        return out

    def _param(
        self, param: _Param, path: Mapping[str, str], query: Any, headers: Any
    ) -> list[Violation]:
        spec = param.spec
        location = spec.location
        if location == "path":
            values = [path[spec.name]] if spec.name in path else []
        elif location == "query":
            values = query.getall(spec.name, []) if hasattr(query, "getall") else []
        else:
            values = headers.getall(spec.name, []) if hasattr(headers, "getall") else []
        pointer = "/" + _escape(spec.name)
        if not values:
            if not spec.required:
                return []
            allowed = facts.allowed_values(spec.schema, self.document)
            return [
                Violation(
                    pointer,
                    location,
                    f"is a required {location} parameter",
                    None,
                    allowed,
                    facts.example(spec.schema, self.document),
                )
            ]
        if param.validator is None:
            return []
        if param.array_of is not None:
            if not spec.explode or location in ("path", "header"):
                values = [v for value in values for v in value.split(",")]
            instance: Any = [_coerce(v, param.array_of) for v in values]
        else:
            instance = _coerce(values[0], param.kind)
        return self._violations(param.validator, instance, pointer, location)

    def _body(
        self, checked: CheckedOperation, content_type: str, body: bytes | None
    ) -> list[Violation]:
        spec = checked.operation.body
        if spec is None or body is None:  # None: a body mend did not read (over its cap, encoded)
            return []
        if not body:
            if spec.required:
                allowed = facts.allowed_values(spec.schema, self.document) if spec.schema else None
                return [Violation("", "body", "a request body is required", None, allowed, None)]
            return []
        media_type = content_type.split(";", maxsplit=1)[0].strip().lower()
        if spec.media_types and not _accepted(media_type, spec.media_types):
            return [
                Violation(
                    "",
                    "body",
                    f"Content-Type {media_type[:100] or '(none)'} is not accepted",
                    media_type[:100] or None,
                    {"enum": list(spec.media_types)},
                    spec.media_types[0],
                )
            ]
        if checked.body is None or not _json_type(media_type):
            return []
        document = nesting.loads(body)
        if document is NOT_JSON:
            return [
                Violation(
                    "", "body", "the body is not valid JSON (or nests too deep)", None, None, None
                )
            ]
        return self._violations(checked.body, document, "", "body")

    def _violations(
        self, validator: Validator, instance: Any, base: str, location: str
    ) -> list[Violation]:
        out: list[Violation] = []
        seen: set[str] = set()
        for error in validator.iter_errors(instance):
            for violation in self._from_error(error, base, location):
                if violation.pointer not in seen or error.validator != "required":
                    seen.add(violation.pointer)
                    out.append(violation)
            if len(out) >= MAX_VIOLATIONS:
                break
        return out

    def _from_error(self, error: ValidationError, base: str, location: str) -> list[Violation]:
        pointer = base + "".join("/" + _escape(str(p)) for p in error.absolute_path)
        keyword = str(error.validator)
        schema = error.schema if isinstance(error.schema, Mapping) else {}
        if keyword == "required" and isinstance(error.instance, Mapping):
            properties = facts.combined(schema, self.document).get("properties") or {}
            out = []
            required: Any = error.validator_value
            for name in required if isinstance(required, list) else ():
                if isinstance(name, str) and name not in error.instance:
                    sub = properties.get(name, {})
                    out.append(
                        Violation(
                            f"{pointer}/{_escape(name)}",
                            location,
                            "is required",
                            None,
                            facts.allowed_values(sub, self.document),
                            facts.example(sub, self.document),
                        )
                    )
            return out
        if keyword == "additionalProperties" and isinstance(error.instance, Mapping):
            known = sorted(facts.combined(schema, self.document).get("properties") or {})
            out = []
            for name in error.instance:
                if isinstance(name, str) and name not in known:
                    out.append(
                        Violation(
                            f"{pointer}/{_escape(name)}",
                            location,
                            "is not a property of this object",
                            None,
                            {"properties": known[: facts.MAX_ENUM]},
                            facts.suggest({"enum": known}, name) if known else None,
                        )
                    )
            return out
        allowed = facts.allowed_values(schema, self.document)
        received = echo(error.instance)
        return [
            Violation(
                pointer,
                location,
                _reason(keyword, error.validator_value),
                received,
                allowed,
                facts.suggest(allowed, error.instance),
            )
        ]


def _reason(keyword: str, value: Any) -> str:
    shown = echo(value)
    reasons = {
        "enum": "must be one of the values in allowed_values.enum",
        "const": f"must be {shown!r}",
        "type": f"must be of type {shown}",
        "format": f"must be a valid {shown}",
        "pattern": f"must match the pattern {shown}",
        "minimum": f"must be at least {shown}",
        "maximum": f"must be at most {shown}",
        "exclusiveMinimum": f"must be greater than {shown}",
        "exclusiveMaximum": f"must be less than {shown}",
        "multipleOf": f"must be a multiple of {shown}",
        "minLength": f"must be at least {shown} characters long",
        "maxLength": f"must be at most {shown} characters long",
        "minItems": f"must have at least {shown} items",
        "maxItems": f"must have at most {shown} items",
        "uniqueItems": "must not repeat items",
        "oneOf": "must match exactly one of the documented alternatives",
        "anyOf": "must match one of the documented alternatives",
        "nullable": "must not be null",
    }
    return reasons.get(keyword, f"does not satisfy the schema's {keyword[:40]}")


def echo(value: Any) -> Any:
    """What was sent, as short as an envelope can carry it."""
    if isinstance(value, str):
        return value if len(value) <= _ECHO_CHARS else value[: _ECHO_CHARS - 1] + "…"
    if isinstance(value, Mapping | list):
        try:
            size = len(orjson.dumps(value))
        except (TypeError, orjson.JSONEncodeError):
            return None
        return value if size <= _ECHO_CHARS else None
    return value


def _escape(segment: str) -> str:
    return segment.replace("~", "~0").replace("/", "~1")


def _scalar(schema: Mapping[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if kind is None and ("enum" in schema or "pattern" in schema or "format" in schema):
        return "string"
    return kind if kind in ("string", "integer", "number", "boolean") else None


def _coerce(text: str, kind: str | None) -> Any:
    """A parameter's text as the type its schema names; left as text when it is not one."""
    try:
        if kind == "integer":
            return int(text)
        if kind == "number":
            number = float(text)
            return int(number) if number.is_integer() and "." not in text else number
    except ValueError:
        return text
    if kind == "boolean" and text in ("true", "false"):
        return text == "true"
    return text


def _json_type(media_type: str) -> bool:
    return media_type == "application/json" or media_type.endswith("+json")


def _accepted(media_type: str, documented: tuple[str, ...]) -> bool:
    for item in documented:
        base = item.split(";")[0].strip()
        if base in ("*/*", media_type) or (
            base.endswith("/*") and media_type.startswith(base[:-1])
        ):
            return True
    return False
