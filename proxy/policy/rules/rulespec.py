"""The rule file's schema: what a rule may say, validated once at load.

Every check that can fail (regex syntax, JMESPath syntax, template syntax, enum values) runs here,
inside the pydantic validators, so a rule that loads is a rule that compiles; ``rulefile.py``
reads the files and reports what these refuse at ``file:line``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import jmespath.exceptions
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from proxy.config.re2compile import checked
from proxy.policy.envelope.model import Action, Category, Severity
from proxy.policy.rules.query import Query, compile_query
from proxy.policy.rules.rulecheck import TEMPLATE_FIELDS
from proxy.policy.rules.template import Template, TemplateError

_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
_CODE = re.compile(r"^[A-Z][A-Z0-9_]*$")
_STATUS_CLASS = re.compile(r"^([1-5])xx$")
_STATUS_RANGE = re.compile(r"^(\d{3})-(\d{3})$")


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


_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")


def _header_name(value: str | None) -> str | None:
    """A response header's name (RFC 9110 token), lower case as headers are read."""
    if value is None:
        return None
    if not _HEADER_NAME.match(value):
        raise ValueError(f"header {_shown(value)} is not a header name")
    return value.lower()


class JsonCondition(_Model):
    """A JMESPath query over the JSON body (or a header's JSON value); truthy unless an operator
    is given."""

    #: a JMESPath query over the JSON body; alone, it holds when the result is truthy
    query: str
    #: read the query over this response header's value parsed as JSON instead of the body
    #: (Prism's ``sl-violations``); a header that is absent or not JSON holds nothing
    header: str | None = None
    #: holds when the result equals this
    equals: Any = None
    #: holds when the result is one of these
    one_of: list[Any] | None = None
    #: holds when the result is a string this RE2 regex finds something in
    matches: str | None = None
    #: ``true``: holds when the result is not null; ``false``: when it is
    exists: bool | None = None

    @field_validator("query")
    @classmethod
    def _query(cls, value: str) -> str:
        compile_jmespath(value)
        return value

    _header = field_validator("header")(_header_name)

    @field_validator("matches")
    @classmethod
    def _matches(cls, value: str | None) -> str | None:
        if value is not None:
            checked(value)
        return value

    @model_validator(mode="after")
    def _one_operator(self) -> JsonCondition:
        given = [n for n in ("equals", "one_of", "matches", "exists") if n in self.model_fields_set]
        if len(given) > 1:
            raise ValueError(f"give at most one of equals/one_of/matches/exists, got {given}")
        return self


class When(_Model):
    #: the response status: ``422``, ``[400, 422]``, ``"4xx"`` or ``"500-504"``
    status: StatusSpec | None = None
    #: the request's method, or a list of them
    method: str | list[str] | None = None
    #: a glob over the path the agent sent to mend, percent-decoded, the route's prefix kept (``**``
    #: crosses slashes)
    path: str | list[str] | None = None
    #: an RE2 regex over the same path, instead of a glob
    path_regex: str | None = None
    #: request header name to an RE2 regex, or ``true`` for present
    request_headers: dict[str, str | bool] | None = None
    #: response header name to an RE2 regex, or ``true`` for present
    headers: dict[str, str | bool] | None = None
    #: response content types, matched as prefixes
    content_type: str | list[str] | None = None
    #: an RE2 regex searched in the response body; its named groups become variables
    body: str | None = None
    #: JMESPath conditions over the JSON body, all of which must hold
    json_: list[JsonCondition] | None = Field(default=None, alias="json")
    #: the protocol the agent speaks (proxy/policy/protocols): http, jsonrpc (MCP included), mcp,
    #: graphql
    protocol: str | list[str] | None = None
    #: the MCP tool a ``tools/call`` names, and the JSON-RPC method: names or globs
    tool: str | list[str] | None = None
    #: the JSON-RPC method of the call: names or globs
    rpc_method: str | list[str] | None = None
    #: nested matchers that must all hold
    all: list[When] | None = None
    #: nested matchers of which one must hold
    any: list[When] | None = None
    #: a nested matcher that must not hold
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
            checked(value)
        return value

    @field_validator("request_headers", "headers")
    @classmethod
    def _header_regexes(cls, value: dict[str, str | bool] | None) -> dict[str, str | bool] | None:
        for pattern in (value or {}).values():
            if isinstance(pattern, str):
                checked(pattern)
            elif pattern is not True:
                raise ValueError("a header matcher is a regex or true (present)")
        return value


class InvalidFieldsSpec(_Model):
    """One invalid field per item of ``each`` (a list, or an object flattened to its leaves)."""

    #: JMESPath over the body: the list (or object, flattened to its leaves) of invalid fields
    each: str
    #: read ``each`` over this response header's value parsed as JSON instead of the body
    header: str | None = None
    #: JMESPath relative to the item: the field's location, made an RFC 6901 pointer
    field: str | None = None
    #: JMESPath relative to the item: why the field is invalid
    reason: str | None = None
    #: JMESPath relative to the item: the value the agent sent
    received: str | None = None
    #: JMESPath relative to the item: the constraint (``{gt: 0}`` becomes
    #: ``{exclusiveMinimum: 0}``); else read from the reason
    allowed_values: str | None = None
    #: leading location names dropped from the field's path (``[body, qty]`` is ``/qty``)
    strip: tuple[str, ...] = ("body", "query", "path", "header", "cookie", "form")
    #: ASP.NET and Go name C#/Go properties (``Qty``) where the request JSON says ``qty``.
    field_case: Literal["as_is", "camel"] = "as_is"

    _header = field_validator("header")(_header_name)

    @field_validator("each", "field", "reason", "received", "allowed_values")
    @classmethod
    def _queries(cls, value: str | None) -> str | None:
        if value is not None:
            compile_jmespath(value)
        return value


class InvalidFieldTemplate(_Model):
    """One invalid field written out in the rule, for upstreams that only say it in prose."""

    #: template: the field's pointer
    field: str
    #: template: why it is invalid
    reason: str | None = None
    #: template: the value the agent sent
    received: Any = None
    #: template: what the agent may send instead
    allowed_values: Any = None

    @field_validator("field", "reason", "received", "allowed_values")
    @classmethod
    def _templates(cls, value: Any) -> Any:
        return _check_template(value)


class EnvelopeSpec(_Model):
    #: stable SCREAMING_SNAKE identifier an agent can branch on
    code: str
    #: one of the envelope's categories (docs/contract.md §1)
    category: Category
    #: what the agent does next; default from ``category``
    action: Action | None = None
    #: ``info``, ``warning``, ``error`` or ``fatal``; default from ``action``
    severity: Severity | None = None
    #: template: one declarative sentence saying what failed
    message: str | None = None
    #: template: an imperative one-liner naming exact fields and operations
    hint: str | None = None
    #: templates: the numbered recovery steps, in order
    steps: list[str] | None = None
    #: template: the JSON Pointer of the offending input
    field: str | None = None
    #: every invalid field: read from the body (``each``...), or written out as a list
    invalid_fields: InvalidFieldsSpec | list[InvalidFieldTemplate] | None = None
    #: templates: what the agent may send instead
    allowed_values: Any = None
    #: template: a value the agent may send instead
    suggested_value: Any = None
    #: template: the operation to call first (``POST /orders/{{ id }}/confirm``)
    next_operation: str | None = None
    #: templates: that operation's arguments
    next_operation_args: dict[str, Any] | None = None
    #: other codes an agent handling this one should know
    related_codes: list[str] = []
    #: milliseconds to wait, or a template (``{{ wait | ms }}``); headers are read without it
    retry_after_ms: int | str | None = None
    #: keep the upstream's small structured detail as ``upstream_detail``
    #: (proxy/policy/envelope/upstream_detail.py)
    upstream_detail: bool = False
    #: ``unknown``: the answer says the call may have taken effect (a tool's backend timed out
    #: or reset mid-call), so a retry follows docs/contract.md §1's idempotency rules, as for
    #: mend's own timeouts: safe for idempotent methods and tools annotated idempotent or
    #: read-only
    applied: Literal["unknown"] | None = None

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

    #: why the error happens
    cause: str | None = None
    #: how to avoid it
    fix: str | None = None
    #: an upstream body the rule matches
    example: dict[str, Any] | None = None
    #: ``stable``, or how settled the code is
    stability: str = "stable"


class RuleSpec(_Model):
    #: unique across everything loaded: lowercase letters, digits, ``.``, ``_``, ``-``
    id: str
    #: what the rule recognises, for ``mend explain`` and the catalogue
    description: str | None = None
    #: the matchers: every one given must hold
    when: When = When()
    #: named JMESPath queries over the JSON body, read by the envelope's templates
    vars: dict[str, str] = {}
    #: the envelope the rule builds
    envelope: EnvelopeSpec
    #: what the error catalog's page says about the code
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
    #: the pack's name (``disabled_packs`` turns it off by it); rule ids start with it by convention
    pack: str | None = None
    #: ``false``: the file is read and checked, its rules not used
    enabled: bool = True
    #: the rules, in order: the first that matches wins
    rules: list[RuleSpec] = []
