"""The canonical agent envelope (docs/contract.md §1).

The envelope is the one thing every agent receives, whatever the upstream said. It is a frozen
pydantic model so that its invariants (``retryable`` exactly when ``action == "retry"``,
``retry_after_ms`` set whenever retryable) are checked in one place, once.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, model_validator


class Category(StrEnum):
    VALIDATION = "validation"
    AUTH = "auth"
    PERMISSION = "permission"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    PRECONDITION = "precondition"
    RATE_LIMIT = "rate_limit"
    UNAVAILABLE = "unavailable"
    TIMEOUT = "timeout"
    INTERNAL = "internal"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    UNSUPPORTED_MEDIA = "unsupported_media"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    DEPENDENCY = "dependency"
    #: a failure no rule recognised (an MCP tool's own words): what the message says is all
    UNCLASSIFIED = "unclassified"


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    FATAL = "fatal"


class Action(StrEnum):
    RETRY = "retry"
    FIX_REQUEST = "fix_request"
    CALL_OTHER_OPERATION = "call_other_operation"
    REAUTHENTICATE = "reauthenticate"
    ESCALATE = "escalate"
    REPORT_BUG = "report_bug"


#: Whether a request may have taken effect upstream (docs/contract.md §1 ``applied``): "no" when
#: mend
#: failed before sending it, "unknown" when it was sent and no usable answer came back.
Applied = Literal["no", "unknown"]


class InvalidField(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    field: str
    reason: str
    received: Any = None
    allowed_values: Any = None
    #: a value inside allowed_values, near what was sent (an OpenAPI document's, docs/contract.md
    #: §8)
    suggested_value: Any = None
    #: where the field is: body, query, path or header (as the upstream said it, or from the
    #: route's OpenAPI document)
    location: str | None = None
    #: false: the route's OpenAPI document does not know this field; None: no document
    documented: bool | None = None


class RepeatInfo(BaseModel):
    """``repeat`` (docs/contract.md §7): this session sent the same request and got the same
    code."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    count: int
    window_s: int
    first_at: str  # RFC 3339, UTC


class SessionPattern(BaseModel):
    """One entry of ``session_patterns`` (docs/contract.md §7): a category recurring in the
    session."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    category: Category
    count: int
    suggestion: str


class Attempts(BaseModel):
    """``attempts`` (docs/contract.md §1): mend sent the request ``count`` times under a retry
    policy (docs/retries.md), over ``elapsed_ms``, and every try failed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    count: int
    elapsed_ms: int


class Envelope(BaseModel):
    """Every field of docs/contract.md §1; absent knowledge is ``None`` or ``[]``, never omitted."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: str
    message: str
    category: Category
    severity: Severity
    retryable: bool
    retry_after_ms: int | None = None
    action: Action
    hint: str
    steps: tuple[str, ...] = ()
    field: str | None = None
    invalid_fields: tuple[InvalidField, ...] = ()
    allowed_values: Any = None
    suggested_value: Any = None
    next_operation: str | None = None
    next_operation_args: dict[str, Any] | None = None
    related_codes: tuple[str, ...] = ()
    #: the upstream's own small structured detail (redacted, capped), kept by fallbacks
    upstream_detail: dict[str, Any] | None = None
    docs_url: str | None = None
    request_id: str
    upstream_status: int | None
    rule: str
    #: ``{id, method, path}`` of the documented operation, and a minimal valid request for it
    #: (``{method, path, query, body}``), when the route has an OpenAPI document (docs/contract.md
    #: §8)
    operation: dict[str, str] | None = None
    example_request: dict[str, Any] | None = None
    #: the cross-call fields (``proxy/policy/crosscall``): absent from the document when unknown
    repeat: RepeatInfo | None = None
    session_patterns: tuple[SessionPattern, ...] = ()
    #: the tries a retry policy made, when there were several and all failed; else absent
    attempts: Attempts | None = None
    #: whether the request may have taken effect upstream; absent when the upstream answered
    applied: Applied | None = None

    @model_validator(mode="after")
    def _retry_invariants(self) -> Envelope:
        self.check_retry()
        return self

    def check_retry(self) -> None:
        """``retryable`` exactly when the action is ``retry``, and then a ``retry_after_ms``."""
        if self.retryable != (self.action is Action.RETRY):
            raise ValueError("retryable must be true exactly when action is 'retry'")
        if self.retryable and self.retry_after_ms is None:
            raise ValueError("retry_after_ms is required when retryable")

    def as_dict(self) -> dict[str, Any]:
        """The ``error`` object's members, in contract order, JSON-ready; the cross-call
        fields only when they say something."""
        data = self.model_dump(mode="json")
        if data["repeat"] is None:
            del data["repeat"]
        if not data["session_patterns"]:
            del data["session_patterns"]
        if data["attempts"] is None:
            del data["attempts"]
        if data["applied"] is None:
            del data["applied"]
        return data


Model = TypeVar("Model", bound=BaseModel)
_set = object.__setattr__
#: per model class, every field with its default (required ones ``None``), in declared order
_DEFAULTS: dict[type[BaseModel], dict[str, Any]] = {}


def made(cls: type[Model], fields: Mapping[str, Any]) -> Model:
    """``cls(**fields)`` without pydantic's validation, for values mend made itself of the declared
    types (issue 29: validating what mend just built cost a rewrite about a tenth of its time).

    Every required field must be in ``fields``; the rest take their defaults. The model is the
    validated one's equal (``tests/policy/envelope/test_build.py`` checks it on every pack case); an
    envelope's retry invariants are still checked.
    """
    defaults = _DEFAULTS.get(cls)
    if defaults is None:
        defaults = _DEFAULTS[cls] = {
            name: None if info.is_required() else info.get_default(call_default_factory=True)
            for name, info in cls.model_fields.items()
        }
    values = dict(defaults)
    values.update(fields)
    model = cls.__new__(cls)
    _set(model, "__dict__", values)
    _set(model, "__pydantic_fields_set__", set(fields))
    _set(model, "__pydantic_extra__", None)
    _set(model, "__pydantic_private__", None)
    if isinstance(model, Envelope):
        model.check_retry()
    return model


def revised(model: Model, update: Mapping[str, Any]) -> Model:
    """``model.model_copy(update=update)`` without its copies of the copy: the same model,
    ``update``'s fields replaced (not validated, as ``model_copy`` does not)."""
    values = dict(model.__dict__)
    values.update(update)
    copy = type(model).__new__(type(model))
    _set(copy, "__dict__", values)
    _set(copy, "__pydantic_fields_set__", model.__pydantic_fields_set__ | update.keys())
    _set(copy, "__pydantic_extra__", None)
    _set(copy, "__pydantic_private__", None)
    return copy


def envelope_body(envelope: Envelope) -> dict[str, Any]:
    """The default rendering's document: ``{"error": {...}}``."""
    return {"error": envelope.as_dict()}
