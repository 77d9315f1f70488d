"""A rule's ``envelope:`` block compiled at load: every template parsed, the action derived."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.policy.envelope.model import Action, Category, Severity
from proxy.policy.envelope.scrubber import Remembered
from proxy.policy.rules.rulespec import EnvelopeSpec, InvalidFieldsSpec, compile_jmespath
from proxy.policy.rules.template import Template, compile_value

DEFAULT_ACTION: dict[Category, Action] = {
    Category.VALIDATION: Action.FIX_REQUEST,
    Category.AUTH: Action.REAUTHENTICATE,
    Category.PERMISSION: Action.ESCALATE,
    Category.NOT_FOUND: Action.FIX_REQUEST,
    Category.CONFLICT: Action.FIX_REQUEST,
    Category.PRECONDITION: Action.FIX_REQUEST,
    Category.RATE_LIMIT: Action.RETRY,
    Category.UNAVAILABLE: Action.RETRY,
    Category.TIMEOUT: Action.RETRY,
    Category.INTERNAL: Action.REPORT_BUG,
    Category.PAYLOAD_TOO_LARGE: Action.FIX_REQUEST,
    Category.UNSUPPORTED_MEDIA: Action.FIX_REQUEST,
    Category.METHOD_NOT_ALLOWED: Action.FIX_REQUEST,
    Category.DEPENDENCY: Action.RETRY,
    Category.UNCLASSIFIED: Action.FIX_REQUEST,
}


def _compile_optional(value: str | None) -> Template | str | None:
    if value is None:
        return None
    compiled = compile_value(value)
    return compiled if isinstance(compiled, Template | str) else str(compiled)


@dataclass(frozen=True, slots=True)
class CompiledInvalidFields:
    """A rule's ``invalid_fields:`` queries: where each offending field is and what it says."""

    each: Any
    field: Any
    reason: Any
    received: Any
    allowed_values: Any
    strip: tuple[str, ...]
    camel: bool
    #: the response header whose JSON value ``each`` reads (``None``: the body)
    header: str | None = None
    #: what these queries found in documents seen before (``invalid_fields.found``)
    memory: Remembered = field(default_factory=Remembered, compare=False, repr=False)

    @classmethod
    def compile(cls, spec: InvalidFieldsSpec) -> CompiledInvalidFields:
        def query(q: str | None) -> Any:
            return compile_jmespath(q) if q is not None else None

        return cls(
            query(spec.each),
            query(spec.field),
            query(spec.reason),
            query(spec.received),
            query(spec.allowed_values),
            spec.strip,
            spec.field_case == "camel",
            spec.header,
        )

    def items(self, document: Any) -> list[tuple[Any, Any, Any, Any]]:
        """(location, reason, received, allowed) per offending field, in the upstream's order."""
        found = self.each.search(document)
        if isinstance(found, dict):
            return [(path, reason, None, None) for path, reason in _leaves(found, ())]
        if not isinstance(found, list):
            return []
        out = []
        for item in found:

            def get(query: Any, item: Any = item) -> Any:
                return query.search(item) if query is not None else None

            location = get(self.field) if self.field is not None else item
            out.append((location, get(self.reason), get(self.received), get(self.allowed_values)))
        return out


def _leaves(node: Any, path: tuple[Any, ...]) -> list[tuple[tuple[Any, ...], str]]:
    """Flatten ``{"items": [{"qty": ["too small"]}]}`` to ``[(("items", 0, "qty"), "too small")]``.

    DRF, Rails and Laravel nest field errors in objects rather than listing them.
    """
    if isinstance(node, dict):
        return [leaf for k, v in node.items() for leaf in _leaves(v, (*path, k))]
    if isinstance(node, list) and node and all(isinstance(v, str) for v in node):
        return [(path, " ".join(node))]
    if isinstance(node, list):
        return [leaf for i, v in enumerate(node) for leaf in _leaves(v, (*path, i))]
    return [(path, str(node))]


def _compile_invalid_fields(
    spec: EnvelopeSpec,
) -> CompiledInvalidFields | list[dict[str, Any]] | None:
    if isinstance(spec.invalid_fields, InvalidFieldsSpec):
        return CompiledInvalidFields.compile(spec.invalid_fields)
    if spec.invalid_fields:
        return [compile_value(item.model_dump()) for item in spec.invalid_fields]
    return None


@dataclass(frozen=True, slots=True)
class CompiledEnvelope:
    """One rule's envelope block, ready for ``build``; ``rule`` is the rule's id."""

    spec: EnvelopeSpec
    rule: str
    action: Action
    severity: Severity
    message: Any
    hint: Any
    steps: Any
    field: Any
    invalid_fields: CompiledInvalidFields | list[dict[str, Any]] | None
    allowed_values: Any
    suggested_value: Any
    next_operation: Any
    next_operation_args: Any
    retry_after_ms: Any
    #: the upstream details made of documents seen before (``build._upstream_detail``)
    details: Remembered = field(default_factory=Remembered, compare=False, repr=False)
    #: whether an envelope of this rule can read more than ``build``'s memory keys it by: the
    #: request id or a header (a template names one)
    live: bool = True
    #: envelopes built before (``build.build``), when not ``live``
    built: Remembered = field(default_factory=Remembered, compare=False, repr=False)

    @classmethod
    def compile(cls, spec: EnvelopeSpec, rule: str) -> CompiledEnvelope:
        action = spec.action or DEFAULT_ACTION[spec.category]
        severity = spec.severity or (
            Severity.FATAL if action in (Action.ESCALATE, Action.REPORT_BUG) else Severity.ERROR
        )
        return cls(
            spec=spec,
            rule=rule,
            action=action,
            severity=severity,
            message=_compile_optional(spec.message),
            hint=_compile_optional(spec.hint),
            steps=compile_value(spec.steps) if spec.steps else None,
            field=_compile_optional(spec.field),
            invalid_fields=_compile_invalid_fields(spec),
            allowed_values=compile_value(spec.allowed_values),
            suggested_value=compile_value(spec.suggested_value),
            next_operation=_compile_optional(spec.next_operation),
            next_operation_args=compile_value(spec.next_operation_args),
            retry_after_ms=compile_value(spec.retry_after_ms),
            live=any(_live(name) for name in _names(spec)) or _reads_header(spec),
        )


def _live(name: str) -> bool:
    """Whether a template variable reads what ``build``'s memory does not key by."""
    return name == "request_id" or name.startswith(("headers.", "request_headers."))


def _reads_header(spec: EnvelopeSpec) -> bool:
    """Whether the block's ``invalid_fields`` are read from a header (``build``'s memory keys
    envelopes by the body, not the headers)."""
    fields = spec.invalid_fields
    return isinstance(fields, InvalidFieldsSpec) and fields.header is not None


def _names(spec: EnvelopeSpec) -> set[str]:
    """Every variable the templates of an envelope block name (its ``invalid_fields`` list
    included), read from its compiled values."""
    names: set[str] = set()
    pending: list[Any] = [
        compile_value(value)
        for value in (
            spec.message,
            spec.hint,
            spec.steps,
            spec.field,
            [item.model_dump() for item in spec.invalid_fields]
            if isinstance(spec.invalid_fields, list)
            else None,
            spec.allowed_values,
            spec.suggested_value,
            spec.next_operation,
            spec.next_operation_args,
            spec.retry_after_ms,
        )
    ]
    while pending:
        value = pending.pop()
        if isinstance(value, Template):
            names.update(value.names)
        elif isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return names
