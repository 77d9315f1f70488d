"""Predicates a rule is made of, compiled once from its ``when`` block.

Each predicate is a small immutable callable ``(exchange, found) -> bool`` that can also say what it
checks, so ``mend explain`` can name the first one that failed. ``found`` collects variables
(regex groups) for the envelope.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proxy.config.re2compile import checked
from proxy.policy.exchange import NOT_JSON, Exchange
from proxy.policy.regex import Linear, escape, linear
from proxy.policy.rules import header_json
from proxy.policy.rules.query import json_equals
from proxy.policy.rules.rulespec import JsonCondition, When, compile_jmespath, parse_status

Found = dict[str, Any]
_JSON_COST = 3
_BODY_COST = 10


@dataclass(frozen=True, slots=True)
class Predicate:
    description: str
    test: Callable[[Exchange, Found], bool]
    #: rough relative cost; a rule tries its cheap conditions first (all must hold anyway)
    cost: int = 1

    def __call__(self, exchange: Exchange, found: Found) -> bool:
        return self.test(exchange, found)


def statuses(when: When) -> frozenset[int] | None:
    """The statuses a ``when`` block can match; ``None`` means it does not say."""
    if when.status is None:
        return None
    items = when.status if isinstance(when.status, list) else [when.status]
    out: frozenset[int] = frozenset()
    for item in items:
        out |= parse_status(item)
    return out


def _glob(pattern: str) -> Linear:
    """A path glob as an RE2 pattern: linear in the path, which the agent chose.

    ``**`` crosses slashes (not newlines), ``*`` and ``?`` stay within one path segment, like
    gitignore globs. Match it with ``fullmatch``.
    """
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(escape(pattern[i]))
            i += 1
    return linear("".join(out))


#: A glob of names or paths (``retry_safe:`` entries, ``proxy/policy/retry/retry_safety.py``), as
#: rules read it.
path_glob = _glob


def _listify(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _header_predicate(kind: str, name: str, pattern: str | bool) -> Predicate:
    def source(ex: Exchange) -> Any:
        return ex.request_headers if kind == "request_headers" else ex.headers

    if pattern is True:
        return Predicate(f"{kind}.{name} present", lambda ex, _: name in source(ex))
    regex = Linear(checked(str(pattern)))

    def test(ex: Exchange, found: Found) -> bool:
        value = source(ex).get(name)
        if value is None or (match := regex.search(value)) is None:
            return False
        found.update({k: v for k, v in match.groupdict().items() if v is not None})
        return True

    return Predicate(f"{kind}.{name} ~ /{pattern}/", test)


_MISSING = object()


def _json_predicate(cond: JsonCondition) -> Predicate:
    query = compile_jmespath(cond.query)
    expression = cond.query
    given = cond.model_fields_set
    header = cond.header
    subject = "json" if header is None else f"headers.{header} json"

    def value(ex: Exchange) -> Any:
        if header is not None:
            got = header_json.query(ex, header, expression, query)
            return _MISSING if got is NOT_JSON else got
        return ex.query(expression, query) if ex.is_json else _MISSING

    if "equals" in given:
        expected = cond.equals
        return Predicate(
            f"{subject} {cond.query} == {expected!r}",
            lambda ex, _: json_equals(value(ex), expected),
        )
    if "one_of" in given:
        options = list(cond.one_of or [])

        def one_of(ex: Exchange, _: Found) -> bool:
            got = value(ex)
            return any(json_equals(got, option) for option in options)

        return Predicate(
            f"{subject} {cond.query} in {options!r}",
            one_of,
            _JSON_COST,
        )
    if "matches" in given:
        regex = Linear(checked(cond.matches or ""))

        def test(ex: Exchange, found: Found) -> bool:
            got = value(ex)
            if got is _MISSING or got is None:
                return False
            match = regex.search(got if isinstance(got, str) else str(got))
            if match is None:
                return False
            found.update({k: v for k, v in match.groupdict().items() if v is not None})
            return True

        return Predicate(f"{subject} {cond.query} ~ /{cond.matches}/", test, _JSON_COST + 2)
    if "exists" in given:
        want = bool(cond.exists)
        return Predicate(
            f"{subject} {cond.query} {'exists' if want else 'absent'}",
            lambda ex, _: (value(ex) not in (_MISSING, None)) == want,
            _JSON_COST,
        )
    return Predicate(
        f"{subject} {cond.query} is truthy",
        lambda ex, _: (v := value(ex)) is not _MISSING and bool(v),
        _JSON_COST,
    )


def compile_when(when: When) -> tuple[Predicate, ...]:
    """Predicates for everything ``when`` says except status (the rule index handles that)."""
    preds: list[Predicate] = []
    if when.method is not None:
        methods = frozenset(m.upper() for m in _listify(when.method))
        preds.append(Predicate(f"method in {sorted(methods)}", lambda ex, _: ex.method in methods))
    if when.path is not None:
        globs = [_glob(p) for p in _listify(when.path)]
        preds.append(
            Predicate(
                f"path matches {when.path!r}",
                lambda ex, _: any(g.fullmatch(ex.path) for g in globs),
            )
        )
    if when.path_regex is not None:
        path_regex = Linear(checked(when.path_regex))
        preds.append(
            Predicate(
                f"path ~ /{when.path_regex}/", lambda ex, _: path_regex.search(ex.path) is not None
            )
        )
    for kind in ("request_headers", "headers"):
        for name, pattern in (getattr(when, kind) or {}).items():
            preds.append(_header_predicate(kind, name.lower(), pattern))
    if when.content_type is not None:
        types = tuple(t.lower() for t in _listify(when.content_type))
        preds.append(
            Predicate(
                f"content type starts with {list(types)}",
                lambda ex, _: ex.content_type.startswith(types),
            )
        )
    preds.extend(_protocol_predicates(when))
    if when.body is not None:
        body = Linear(checked(when.body))

        def body_test(ex: Exchange, found: Found) -> bool:
            match = body.search(ex.text)
            if match is None:
                return False
            found.update({k: v for k, v in match.groupdict().items() if v is not None})
            return True

        preds.append(Predicate(f"body ~ /{when.body}/", body_test, _BODY_COST))
    preds.extend(_json_predicate(c) for c in when.json_ or ())
    for sub in when.all or ():
        preds.append(_block("all", sub))
    if when.any:
        blocks = [_block("any", sub) for sub in when.any]
        preds.append(
            Predicate(
                "any of [" + "; ".join(b.description for b in blocks) + "]",
                lambda ex, found: any(b.test(ex, found) for b in blocks),
                sum(b.cost for b in blocks),
            )
        )
    if when.not_ is not None:
        inner = _block("not", when.not_)
        preds.append(Predicate(f"not ({inner.description})", lambda ex, _: not inner.test(ex, {})))
    return tuple(preds)


def _protocol_predicates(when: When) -> list[Predicate]:
    """``protocol``, ``tool`` and ``rpc_method`` (``proxy/policy/protocols``): the agent's call."""
    preds: list[Predicate] = []
    if when.protocol is not None:
        wanted = frozenset(_listify(when.protocol))
        if "jsonrpc" in wanted:
            wanted |= {"mcp"}  # MCP is JSON-RPC
        preds.append(
            Predicate(f"protocol in {sorted(wanted)}", lambda ex, _: ex.protocol in wanted)
        )
    for kind in ("tool", "rpc_method"):
        names = getattr(when, kind)
        if names is None:
            continue
        globs = tuple(_glob(name) for name in _listify(names))

        def named(
            ex: Exchange, _: Found, kind: str = kind, globs: tuple[Linear, ...] = globs
        ) -> bool:
            value = getattr(ex, kind)
            return value is not None and any(g.fullmatch(value) for g in globs)

        preds.append(Predicate(f"{kind} matches {names!r}", named))
    return preds


def header_names(when: When, kind: str) -> frozenset[str]:
    """The names (lower case) of the ``kind`` headers (``headers`` or ``request_headers``)
    ``when`` or a block nested in it reads: all a rule can see of them."""
    names = frozenset(name.lower() for name in getattr(when, kind) or {})
    if kind == "headers":  # a JSON condition over a header's value reads that header
        names |= {c.header for c in when.json_ or () if c.header is not None}
    nested = [*(when.all or ()), *(when.any or ()), *([when.not_] if when.not_ else [])]
    return names.union(*(header_names(sub, kind) for sub in nested))


def speaks_protocol(when: When) -> bool:
    """Whether ``when`` (or a block nested in it) names ``protocol``, ``tool`` or ``rpc_method``:
    such a rule is about errors a protocol reports, in a 200 as in a 500."""
    if when.protocol is not None or when.tool is not None or when.rpc_method is not None:
        return True
    nested = [*(when.all or ()), *(when.any or ()), *([when.not_] if when.not_ else [])]
    return any(speaks_protocol(sub) for sub in nested)


Requirement = frozenset[str]


def _needs(cond: JsonCondition) -> Requirement | None:
    """Keys a JSON body must have one of for ``cond`` to hold, when that is certain."""
    given = cond.model_fields_set
    if cond.header is not None:  # about a header, not the body's keys
        return None
    if "equals" in given and cond.equals is None:
        return None
    if "one_of" in given and None in (cond.one_of or []):
        return None
    if "exists" in given and not cond.exists:
        return None
    # every other form is false on a null (or non-JSON) value
    return compile_jmespath(cond.query).paths


def required_keys(when: When) -> tuple[Requirement, ...]:
    """Sets of JSON key paths a body must meet (one path of each) for ``when`` to hold.

    A path is a top-level key or two keys joined by ``query.PATH_SEP`` (see ``Query.paths``).

    Derived once at load from conditions that are certainly false when their query is null, so a
    rule whose keys are absent is skipped without evaluating a single predicate.
    """
    needs = [n for c in when.json_ or () if (n := _needs(c)) is not None]
    for sub in when.all or ():
        needs.extend(required_keys(sub))
    if when.any:
        per_branch = [required_keys(sub) for sub in when.any]
        if all(per_branch):
            needs.append(frozenset().union(*(branch[0] for branch in per_branch)))
    return tuple(dict.fromkeys(needs))


def _block(kind: str, when: When) -> Predicate:
    """A nested ``when`` block as one predicate (status included, since no index covers it)."""
    preds = list(compile_when(when))
    codes = statuses(when)
    if codes is not None:
        preds.insert(0, Predicate(f"status in {when.status}", lambda ex, _: ex.status in codes))
    description = " and ".join(p.description for p in preds) or "always"

    tests = tuple(p.test for p in preds)

    def test(ex: Exchange, found: Found) -> bool:
        local: Found = {}
        for check in tests:
            if not check(ex, local):
                return False
        found.update(local)
        return True

    return Predicate(description, test, sum(p.cost for p in preds))
