"""Checks a rule passes before it loads, beyond its schema: every template variable is defined,
and the rule can match at all.

A template reads variables from the rule's own ``vars``, from named groups of its regexes (``body``,
``path_regex``, header regexes, ``json`` ``matches``), or from the built-ins every exchange has.
A name none of them defines renders empty at run time, so a typo (``{{ holdr }}`` for
``{{ holder }}``) used to pass ``mend check`` and produce envelopes with holes; now it is a
``file:line`` error with the closest defined name.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from typing import Any

import orjson

from proxy.policy.rules.template import Template, TemplateError

#: Variables every exchange defines (``variables.Lookup``).
BUILTINS = frozenset(
    {"status", "upstream_status", "upstream_message", "method", "path", "route", "request_id"}
    | {"protocol", "rpc_method", "tool"}  # proxy/policy/protocols: None on plain HTTP
    # MCP tool errors: the argument the text names, its value, the text without the SDK prefix
    | {"argument", "argument_value", "tool_message", "operation"}
)
#: Variables mend's own failures add (``runtime/own_failures.py``): only in the ``proxy`` pack.
OWN_FAILURE_VARS = frozenset({"limit", "wait_ms"})
#: Families of built-ins, by prefix: any header of the response or of the request.
BUILTIN_PREFIXES = ("headers.", "request_headers.")
#: Envelope fields that are templates (``EnvelopeSpec``); ``invalid_fields`` items too.
TEMPLATE_FIELDS = (
    "message",
    "hint",
    "steps",
    "field",
    "allowed_values",
    "suggested_value",
    "next_operation",
    "next_operation_args",
    "retry_after_ms",
)
#: A named group in RE2 or Python syntax. Operator text, read at load time only.
_GROUP = re.compile(r"\(\?P?<([A-Za-z_][A-Za-z0-9_]*)>")


def captures(when: Any) -> set[str]:
    """Names of every named group in the regexes of a ``When`` and its nested conditions."""
    names: set[str] = set()
    pending = [when]
    while pending:
        current = pending.pop()
        if current is None:
            continue
        for pattern in (current.body, current.path_regex):
            if pattern:
                names.update(_GROUP.findall(pattern))
        for headers in (current.headers, current.request_headers):
            for pattern in (headers or {}).values():
                if isinstance(pattern, str):
                    names.update(_GROUP.findall(pattern))
        for condition in current.json_ or ():
            if condition.matches:
                names.update(_GROUP.findall(condition.matches))
        pending.extend([*(current.all or ()), *(current.any or ()), current.not_])
    return names


def template_names(value: Any) -> Iterator[str]:
    """Every variable name the templates inside a YAML value read."""
    if isinstance(value, str):
        if "{{" in value:
            try:
                yield from Template.parse(value).names
            except TemplateError:  # reported by the schema's own check
                return
    elif isinstance(value, dict):
        for item in value.values():
            yield from template_names(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from template_names(item)


def _used(envelope: Any) -> Iterator[str]:
    for name in TEMPLATE_FIELDS:
        yield from template_names(getattr(envelope, name))
    if isinstance(envelope.invalid_fields, list):
        for item in envelope.invalid_fields:
            yield from template_names(item.model_dump())


def undefined_variables(rule: Any, pack: str) -> list[str]:
    """Problems (without location) for each template variable ``rule`` reads but never defines."""
    defined = BUILTINS | set(rule.vars) | captures(rule.when)
    if pack == "proxy":
        defined |= OWN_FAILURE_VARS
    problems = []
    for name in dict.fromkeys(_used(rule.envelope)):
        if name in defined or name.startswith(BUILTIN_PREFIXES):
            continue
        close = difflib.get_close_matches(name, sorted(defined), n=1)
        hint = f" (did you mean {{{{ {close[0]} }}}}?)" if close else ""
        problems.append(
            f"rule {rule.id}: template variable {{{{ {name} }}}} is not defined by a capture, "
            f"a vars entry or a built-in{hint}"
        )
    return problems


#: The protocols whose calls name a ``tool`` (an MCP ``tools/call``) or an ``rpc_method``.
_NAMES_TOOLS = frozenset({"mcp"})
_NAMES_METHODS = frozenset({"jsonrpc", "mcp"})


def contradictions(when: Any) -> list[str]:
    """Why a ``when`` can never hold, from its own top-level conditions (cheap, exact): a
    ``tool`` or ``rpc_method`` on a rule whose ``protocol`` never names one."""
    if when.protocol is None:
        return []
    protocols = {when.protocol} if isinstance(when.protocol, str) else set(when.protocol)
    problems = []
    if when.tool is not None and not protocols & _NAMES_TOOLS:
        problems.append("`tool` is only known on mcp calls, and `protocol` excludes mcp")
    if when.rpc_method is not None and not protocols & _NAMES_METHODS:
        problems.append(
            "`rpc_method` is only known on jsonrpc and mcp calls, and `protocol` excludes both"
        )
    return problems


def conditions_key(when: Any) -> str:
    """A rule's conditions as one comparable value: two rules with the same key match the same
    exchanges."""
    dumped = when.model_dump(mode="json", by_alias=True, exclude_none=True)
    return orjson.dumps(dumped, option=orjson.OPT_SORT_KEYS).decode()


def never_matching(rules: list[Any]) -> Iterator[str]:
    """``file:line: problem`` for each rule of one file that can never match: its conditions
    contradict each other, or an earlier rule of the file has the very same conditions (first
    match wins, so the later one is dead; an operator's file overriding a shipped rule is
    another file, and fine)."""
    first: dict[str, Any] = {}
    for rule in rules:
        for problem in contradictions(rule.spec.when):
            yield f"{rule.source}: rule {rule.spec.id} can never match: {problem}"
        key = conditions_key(rule.spec.when)
        if key in first:
            earlier = first[key]
            yield (
                f"{rule.source}: rule {rule.spec.id} can never match: rule {earlier.spec.id} "
                f"({earlier.source}) has the same conditions and comes first"
            )
        else:
            first[key] = rule
