"""Checking a request against its operation before the upstream sees it.

Every parameter and body schema is compiled once at load, twice over:

- ``jsonschema-rs`` (Rust) answers "is it valid?" for the request that must stay cheap, the
  valid one: about 100 times faster than the Python validator (``bench/openapi.py``);
- ``openapi-schema-validator`` (the ``jsonschema`` validators with OpenAPI's 3.0 and 3.1
  dialects and format checkers) lists every violation of a request the first one refused, and is
  the authority: a request is refused only when it finds a violation too.

Both match ``pattern`` in linear time (RE2 here, the ``regex`` crate there): the patterns are
the operator's, the strings the agent's. A check returns every violation, each with its pointer,
reason, what was sent, what is allowed and, where one can be chosen, a suggestion. Parameters
whose serialisation mend does not read (objects, ``deepObject``, ``content``) are not checked: a
request is never refused for what mend cannot read.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from proxy.policy import json_depth
from proxy.policy.envelope.pointer import escape_segment
from proxy.policy.exchange import NOT_JSON
from proxy.policy.openapi import facts
from proxy.policy.openapi.document import BASE_URI, Document
from proxy.policy.openapi.operations import Body, Operation, Operations, Parameter, PathMatch
from proxy.policy.openapi.schema_prep import (
    NULLABLE_BESIDE,
    RS_FORMATS,
    _linear_additional,
    _linear_pattern_properties,
    absolute_refs,
    cached_linear,
    for_rs,
    linear_pattern,
    nullable_aware,
    referenced,
)
from proxy.policy.openapi.violations import Violation, echo, reason_for

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator

#: Violations reported for one request (the rest are counted in the last one's reason).
MAX_VIOLATIONS = 50
_UNBUILT: Any = object()
#: Each digit as ``1``, every other byte ``0``: a run of 19 ones is a number orjson may not keep.
_DIGITS = bytes(0x31 if 0x30 <= b <= 0x39 else 0x30 for b in range(256))
_LONG_NUMBER = b"1" * 19
#: Headers OpenAPI says a parameter may not describe.
_IGNORED_HEADERS = frozenset({"accept", "content-type", "authorization"})


@dataclass(frozen=True, slots=True)
class Compiled:
    """One schema's two validators: ``fast`` (``None`` when jsonschema-rs cannot compile it)
    says whether an instance is valid, ``full`` lists its violations."""

    full: Validator
    fast: Any


@dataclass(frozen=True, slots=True)
class _Param:
    spec: Parameter
    validator: Compiled | None  # None: not checked (a serialisation mend does not read)
    kind: str | None  # the scalar type values are coerced to
    array_of: str | None  # the item type when the parameter is an array


@dataclass(frozen=True, slots=True)
class CheckedOperation:
    operation: Operation
    params: tuple[_Param, ...]
    body: Compiled | None


class Checker:
    """Validators for the operations of one document, each operation's compiled the first time a
    request calls it (a document of 1,200 operations costs what the called ones need)."""

    def __init__(self, document: Document, operations: Operations) -> None:
        # imported here: a mend without documents does not pay for them at start-up
        import jsonschema_rs  # noqa: PLC0415
        from jsonschema.validators import extend  # noqa: PLC0415
        from openapi_schema_validator import (  # noqa: PLC0415
            OAS30WriteValidator,
            OAS31Validator,
            oas30_format_checker,
            oas31_format_checker,
        )

        self.document = document
        if document.version == "3.0":
            base: Any = OAS30WriteValidator
            self._formats = oas30_format_checker
            self._rs_cls: Any = jsonschema_rs.Draft4Validator
        else:
            base, self._formats = OAS31Validator, oas31_format_checker
            self._rs_cls = jsonschema_rs.Draft202012Validator
        keywords = {
            "pattern": linear_pattern,
            "patternProperties": _linear_pattern_properties,
            "additionalProperties": _linear_additional(base.VALIDATORS["additionalProperties"]),
        }
        if document.version == "3.0":  # null where nullable: true, beside these too
            for name in NULLABLE_BESIDE:
                keywords[name] = nullable_aware(base.VALIDATORS[name])
        self._cls = extend(base, keywords)  # type: ignore[no-untyped-call]
        self._rs_options = jsonschema_rs.RegexOptions()
        self._rs_registry: Any = _UNBUILT
        self._documented = {(op.method, op.path): op for op in operations.all}
        #: each called operation's validators (at most one per documented operation)
        self._compiled: dict[tuple[str, str], CheckedOperation] = {}

    def operation(self, method: str, path: str) -> CheckedOperation:
        """The documented operation ``method path`` compiled (once); ``KeyError`` if unknown."""
        key = (method, path)
        found = self._compiled.get(key)
        if found is None:
            found = self._compiled[key] = self._compile(self._documented[key])
        return found

    @property
    def prepared(self) -> bool:
        """Whether what every compile shares is built."""
        return self._rs_registry is not _UNBUILT

    def prepare(self) -> None:
        """Build what every compile shares (jsonschema-rs's registry: 0.1-0.4 s for GitHub's
        document) now, at load, off the event loop, for a route that validates requests."""
        self._registry()

    def _registry(self) -> Any:
        """jsonschema-rs's registry, built by ``prepare`` or on the first compile: only the parts
        of the document a ``$ref`` names (GitHub's schemas are 2.6 of its 13 MB), as its draft
        reads them."""
        if self._rs_registry is _UNBUILT:
            import jsonschema_rs  # noqa: PLC0415

            data = for_rs(referenced(self.document), self.document.version == "3.0")
            try:
                self._rs_registry = jsonschema_rs.Registry([(BASE_URI, data)])
            except Exception:
                self._rs_registry = None
        return self._rs_registry

    def _validator(self, schema: Any) -> Compiled:
        absolute = absolute_refs(schema)
        full: Validator = self._cls(
            absolute, registry=self.document.registry, format_checker=self._formats
        )
        fast = None
        if self._registry() is not None:
            try:
                fast = self._rs_cls(
                    for_rs(absolute, self.document.version == "3.0"),
                    registry=self._rs_registry,
                    validate_formats=True,
                    formats=RS_FORMATS,
                    pattern_options=self._rs_options,
                )
            except Exception:
                fast = None
        return Compiled(full, fast)

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
        checked = self.operation(match.operation.method, match.operation.path)
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
        pointer = "/" + escape_segment(spec.name)
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
        if location == "query" and spec.required and not spec.allow_empty and not any(values):
            allowed = facts.allowed_values(spec.schema, self.document)
            example = facts.example(spec.schema, self.document)
            reason = "is a required query parameter and must not be empty"
            return [Violation(pointer, location, reason, "", allowed, example)]
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
            return self._missing_body(spec)
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
        document = _json_body(body)
        if document is NOT_JSON:
            return [
                Violation(
                    "", "body", "the body is not valid JSON (or nests too deep)", None, None, None
                )
            ]
        return self._violations(checked.body, document, "", "body")

    def _missing_body(self, spec: Body) -> list[Violation]:
        """An empty body: a violation when the operation requires one."""
        if not spec.required:
            return []
        allowed = facts.allowed_values(spec.schema, self.document) if spec.schema else None
        return [Violation("", "body", "a request body is required", None, allowed, None)]

    def _violations(
        self, compiled: Compiled, instance: Any, base: str, location: str
    ) -> list[Violation]:
        if compiled.fast is not None and compiled.fast.is_valid(instance):
            return []
        found: dict[str, Violation] = {}  # one per pointer, its reasons joined
        for error in compiled.full.iter_errors(instance):
            for violation in self._from_error(error, base, location):
                first = found.get(violation.pointer)
                if first is None:
                    found[violation.pointer] = violation
                elif violation.reason not in first.reason and first.reason.count("; ") < 2:
                    reason = f"{first.reason}; {violation.reason}"
                    found[violation.pointer] = replace(first, reason=reason)
            if len(found) >= MAX_VIOLATIONS:
                break
        return list(found.values())

    def _from_error(self, error: ValidationError, base: str, location: str) -> list[Violation]:
        pointer = base + "".join("/" + escape_segment(str(p)) for p in error.absolute_path)
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
                            f"{pointer}/{escape_segment(name)}",
                            location,
                            "is required",
                            None,
                            facts.allowed_values(sub, self.document),
                            facts.example(sub, self.document),
                        )
                    )
            return out
        if keyword == "additionalProperties" and isinstance(error.instance, Mapping):
            resolved = facts.combined(schema, self.document)
            known = sorted(resolved.get("properties") or {})
            covered = [cached_linear(str(p)) for p in resolved.get("patternProperties") or ()]
            out = []
            for name in list(error.instance)[:MAX_VIOLATIONS]:
                if (
                    isinstance(name, str)
                    and name not in known
                    and not any(c is not None and c.search(name) for c in covered)
                ):
                    out.append(
                        Violation(
                            f"{pointer}/{escape_segment(name)}",
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
                reason_for(keyword, error.validator_value),
                received,
                allowed,
                facts.suggest(allowed, error.instance),
            )
        ]


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
    if kind in ("integer", "number"):
        return _number(text, kind)
    if kind == "boolean" and text in ("true", "false"):
        return text == "true"
    return text


def _number(text: str, kind: str) -> Any:
    """ASCII digits as JavaScript's ``Number`` reads them (ajv's type coercion, which Prism and
    most validators use), else the text: Python's ``int`` and ``float`` also take other
    scripts' digits (``\u0661\u0662``), underscores (``1_000``) and ``nan``/``inf``, which no
    API reads as a number, and such a parameter was forwarded as valid (issue 42)."""
    if not text.isascii() or "_" in text:
        return text
    try:
        number = float(text) if kind == "number" else int(text)
    except ValueError:
        return text
    if isinstance(number, float):
        if not math.isfinite(number):
            return text
        return int(number) if number.is_integer() and "." not in text else number
    return number


def _json_body(body: bytes) -> Any:
    """The body parsed (``NOT_JSON`` when it is not JSON, or nests too deep), every integer kept."""
    document = json_depth.loads(body)
    if document is not NOT_JSON and _LONG_NUMBER in body.translate(_DIGITS):
        # orjson reads an integer past 64 bits as a float; the standard library keeps it
        document = json.loads(body)
    return document


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
