"""Rules proposed from the shapes only a fallback explained (``mend suggest``, ``GET /suggest``).

For each shape (``proxy/observation/shapes.py``), one rule file and its ``mend test`` cases, as
text with every choice explained in a comment for the operator who reviews it:

- the match: the status, the media type, and what identifies the shape: a JSON body's code key
  with its value when it reads as a constant (``E_QTY_RANGE``), else the keys every answer had; an
  HTML title or a text line as an RE2 pattern with its variable parts left open;
- the envelope: the message from the key that carries one (``errmsg``, ``error_description``,
  ``detail``...), the field from a key that names one (``param``, ``field``...), a wait from a key
  that states one, and the code and category of the fallback that explained it unless the words
  say better (``not found``, ``already exists``, ``must be``...).

Nothing is loaded from here: the operator copies a proposal into the rule directory and commits.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson
import yaml

from proxy.observation.shapes import Seen
from proxy.policy.regex import Linear, deferred

#: keys that carry an error's message, best first (the world's APIs: Stripe, OAuth 2.0, Slack,
#: WeChat, Google, RFC 9457, Spring, FastAPI, Rails...)
MESSAGE_KEYS = (
    "message",
    "msg",
    "errmsg",
    "error_message",
    "errorMessage",
    "error_description",
    "detail",
    "details",
    "description",
    "title",
    "reason",
    "error.message",
    "error.msg",
    "error.detail",
    "error.description",
    "errors[].message",
    "errors[].msg",
    "errors[].detail",
    "error",
)
#: keys that name the request field at fault
FIELD_KEYS = (
    "param",
    "field",
    "parameter",
    "property",
    "pointer",
    "path",
    "error.param",
    "error.field",
    "errors[].field",
    "errors[].param",
    "errors[].property",
    "errors[].path",
)
#: keys that carry the API's own error code
CODE_KEYS = ("code", "errcode", "error_code", "errorCode", "error.code", "error.type", "type")
#: keys that state a wait, in seconds
WAIT_KEYS = ("retry_after", "retryAfter", "retry_after_seconds", "wait", "error.retry_after")

#: words in a message that say more than the status did: (pattern, code, category, why)
_WORDS: tuple[tuple[Linear, str, str, str], ...] = (
    (deferred(r"(?i)not found|no such|does not exist|unknown"), "RESOURCE_NOT_FOUND", "not_found",
     "the message says something does not exist"),
    (deferred(r"(?i)already exists|duplicate|conflict"), "CONFLICT", "conflict",
     "the message says it conflicts with what exists"),
    (deferred(r"(?i)rate limit|too many requests|throttl"), "RATE_LIMITED", "rate_limit",
     "the message says the caller is rate limited"),
    (deferred(r"(?i)must be|required|invalid|between|too (?:long|short|large|small)|expected"),
     "VALIDATION_FAILED", "validation", "the message says a value is wrong"),
)  # fmt: skip
#: the fallbacks' code and category by status class, for a shape whose rule is not known here
_BY_STATUS = {4: ("CLIENT_ERROR", "validation"), 5: ("SERVER_ERROR", "internal")}
_CONSTANT = deferred(r"^[A-Za-z][A-Za-z0-9_.:-]{1,63}$")
_PLACEHOLDERS = {"<n>": r"\d+(?:[.:]\d+)*", "<id>": r"[0-9A-Fa-f-]{8,}", '"..."': r'"[^"]*"'}
_META = frozenset("\\.^$|?*+()[]{}")
_SPLIT = deferred(r'(<n>|<id>|"\.\.\.")')


@dataclass(frozen=True, slots=True)
class Proposal:
    """One shape's proposed rule file and case file (YAML text), and where to write them."""

    rule_id: str
    name: str
    rules: str
    cases: str

    def as_dict(self) -> dict[str, str]:
        return {
            "rule_id": self.rule_id,
            "name": self.name,
            "rules": self.rules,
            "cases": self.cases,
        }


def propose(seen: Seen, fallbacks: dict[str, tuple[str, str]]) -> Proposal:
    """The rule and cases for ``seen``; ``fallbacks`` maps a fallback's id to its code and
    category (``fallback.422`` -> ``VALIDATION_FAILED``, ``validation``)."""
    shape = seen.shape
    digest = hashlib.sha256(repr(shape).encode()).hexdigest()[:6]
    slug = "".join(c if c.isalnum() else "_" for c in shape.route.lower()).strip("_") or "route"
    rule_id = f"suggested.{slug}_{shape.status}_{digest}"
    sample = _parsed(seen.sample) if shape.kind == "json" else None
    paths = dict(p.rsplit(":", 1) for p in shape.structure) if shape.kind == "json" else {}
    lines = _header(seen, rule_id)
    lines += _when(seen, paths, sample)
    vars_, envelope = _envelope(seen, paths, sample, fallbacks)
    lines += vars_ + envelope
    rules = "\n".join(lines) + "\n"
    cases = _cases(seen, rule_id, envelope_code(envelope), sample)
    return Proposal(rule_id, f"{slug}-{shape.status}-{digest}", rules, cases)


def envelope_code(envelope: list[str]) -> str:
    line = next(line for line in envelope if line.strip().startswith("code: "))
    return line.split(": ", 1)[1]


def _parsed(sample: str) -> Any:
    try:
        return orjson.loads(sample)
    except orjson.JSONDecodeError:
        return None  # cut short by the sample's cap


def _quoted(value: Any) -> str:
    """``value`` as one YAML flow scalar."""
    return (
        yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("\n...")
    )


def _header(seen: Seen, rule_id: str) -> list[str]:
    shape = seen.shape
    return [
        f"# Proposed by mend from {seen.count} answer(s) on route {shape.route} that only",
        f"# {seen.rule} explained (first seen {_when_seen(seen.first_seen)}, last",
        f"# {_when_seen(seen.last_seen)}; e.g. {seen.method} {seen.path}). Review the wording,",
        "# then copy this file into your rule directory and commit it; nothing loads it before.",
        "pack: suggested",
        "rules:",
        f"  - id: {rule_id}",
        f"    description: {_quoted(f'{shape.status} {shape.kind} answers on {shape.route}')}",
        "    when:",
        f"      status: {shape.status}",
    ]


def _when_seen(epoch: float) -> str:
    import datetime  # noqa: PLC0415 (only for proposals)

    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _when(seen: Seen, paths: dict[str, str], sample: Any) -> list[str]:
    shape = seen.shape
    lines = []
    if shape.media_type:
        lines += [
            "      # the media type every such answer came with",
            f"      content_type: {_quoted(shape.media_type)}",
        ]
    if shape.kind == "json":
        return lines + _json_match(paths, sample)
    if shape.kind in ("html", "text") and shape.structure and shape.structure[0]:
        what = "page title" if shape.kind == "html" else "first line"
        return [
            *lines,
            f"      # the {what}, its numbers, ids and quoted values left open",
            f"      body: {_quoted(_pattern(shape.structure[0]))}",
        ]
    return lines


def _json_match(paths: dict[str, str], sample: Any) -> list[str]:
    code_key = _first(CODE_KEYS, paths, "string")
    value = _value(sample, code_key) if code_key else None
    if code_key and isinstance(value, str) and _CONSTANT.fullmatch(value):
        return [
            f"      # the API's own code for this error ({code_key}) identifies it",
            "      json:",
            f"        - {{query: {_quoted(_query(code_key))}, equals: {_quoted(value)}}}",
        ]
    named = (_message_key(paths, sample), _field_key(paths))
    keys = [k for k in named if k is not None] or [k for k in paths if k != "$"][:2]
    if not keys:
        return []
    lines = ["      # the keys every such answer had", "      json:"]
    return lines + [f"        - {{query: {_quoted(_query(k))}, exists: true}}" for k in keys]


def _envelope(
    seen: Seen, paths: dict[str, str], sample: Any, fallbacks: dict[str, tuple[str, str]]
) -> tuple[list[str], list[str]]:
    """The rule's ``vars:`` lines and its ``envelope:`` lines."""
    message = _message_key(paths, sample)
    field_key = _field_key(paths)
    wait = _first(WAIT_KEYS, paths, "number")
    keys = {"message": message, "field": field_key, "wait": wait}
    chosen = {name: key for name, key in keys.items() if key}
    vars_ = ["    vars:"] if chosen else []
    vars_ += [f"      {name}: {_quoted(_query(key))}  # {key}" for name, key in chosen.items()]
    code, category, why = _code(seen, sample, message, fallbacks)
    envelope = ["    envelope:", f"      # {why}", f"      code: {code}"]
    envelope.append(f"      category: {category}")
    if message:
        envelope += ["      # the upstream's own words", '      message: "{{ message }}"']
    else:
        envelope += ["      # no key carries a message: the upstream's detail goes as it came",
                     "      upstream_detail: true"]  # fmt: skip
    if field_key:
        envelope += ["      # the field the upstream named, as a JSON pointer",
                     '      field: "/{{ field }}"']  # fmt: skip
    if wait:
        envelope += ["      # the wait the body states, in seconds",
                     '      retry_after_ms: "{{ wait | ms }}"']  # fmt: skip
    return vars_, envelope


def _code(
    seen: Seen, sample: Any, message: str | None, fallbacks: dict[str, tuple[str, str]]
) -> tuple[str, str, str]:
    said = _value(sample, message) if message else None
    text = said if isinstance(said, str) else (seen.shape.structure or ("",))[0]
    for pattern, code, category, why in _WORDS if seen.shape.status < 500 else ():
        if pattern.search(text):
            return code, category, f"{why}: {code}, {category}"
    known = fallbacks.get(seen.rule)
    if known is not None:
        return known[0], known[1], f"as {seen.rule} said: the status alone decides"
    code, category = _BY_STATUS.get(seen.shape.status // 100, ("SERVER_ERROR", "internal"))
    return code, category, "the status class alone decides"


def _first(keys: tuple[str, ...], paths: dict[str, str], kind: str) -> str | None:
    return next((k for k in keys if paths.get(k) == kind), None)


def _message_key(paths: dict[str, str], sample: Any) -> str | None:
    """The key that carries the message: a name APIs use for one, else the string the sample
    says most words in (an API's own name for its message, ``explanation``, ``why``)."""
    known = _first(MESSAGE_KEYS, paths, "string")
    if known is not None:
        return known
    said = {k: _value(sample, k) for k, kind in paths.items() if kind == "string"}
    prose = {k: v for k, v in said.items() if isinstance(v, str) and v.count(" ") >= 2}
    return max(prose, key=lambda k: len(prose[k]), default=None)


def _field_key(paths: dict[str, str]) -> str | None:
    """The key that names a field: a name APIs use for one, else one that ends with it
    (``offending_param``, ``invalidField``)."""
    known = _first(FIELD_KEYS, paths, "string")
    if known is not None:
        return known
    endings = tuple(k.lower() for k in FIELD_KEYS)
    return next(
        (k for k, kind in paths.items() if kind == "string" and k.lower().endswith(endings)),
        None,
    )


def _query(key: str) -> str:
    """A key path (``errors[].message``) as JMESPath (``errors[0].message``), each name quoted
    where JMESPath needs it."""
    parts = []
    for name in key.split("."):
        array = name.endswith("[]")
        bare = name.removesuffix("[]")
        plain = bare.replace("_", "a").isalnum() and not bare[:1].isdigit()
        parts.append((bare if plain else _quoted_name(bare)) + ("[0]" if array else ""))
    return ".".join(parts)


def _quoted_name(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _value(sample: Any, key: str | None) -> Any:
    node = sample
    for name in (key or "").split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(name.removesuffix("[]"))
        if name.endswith("[]"):
            node = node[0] if isinstance(node, list) and node else None
    return node


def _pattern(masked: str) -> str:
    """A masked line as an RE2 pattern: literal text escaped, placeholders open again."""
    out = []
    rest = masked
    while (found := _SPLIT.search(rest)) is not None:
        out.append(_literal(rest[: found.start()]))
        out.append(_PLACEHOLDERS[found.group(1) or ""])
        rest = rest[found.end() :]
    out.append(_literal(rest))
    return "".join(out)


def _literal(text: str) -> str:
    """``text`` as RE2 that matches it: its metacharacters escaped, nothing else."""
    return "".join(f"\\{c}" if c in _META else c for c in text)


def _cases(seen: Seen, rule_id: str, code: str, sample: Any) -> str:
    shape = seen.shape
    response: dict[str, Any] = {"status": shape.status}
    headers = dict(seen.headers)
    if shape.media_type:
        headers.setdefault("Content-Type", shape.media_type)
    response["headers"] = headers
    if sample is not None:
        response["json"] = sample
    else:
        response["body"] = seen.sample
    case = {
        "name": f"the sampled {shape.status} answer from {shape.route}",
        "request": {"method": seen.method or "GET", "path": seen.path or "/"},
        "response": response,
        "expect": {"rule": rule_id, "code": code},
    }
    head = "# The answer mend sampled (masked as its log masks bodies); run: mend test\n"
    return head + yaml.safe_dump({"cases": [case]}, sort_keys=False, allow_unicode=True)
