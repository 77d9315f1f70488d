"""A safe template: ``{{ name | filter }}`` reads values, never runs code.

A template is parsed once, when its rule is loaded, into literal text and variable references.
Rendering only substitutes values; the substituted text is never parsed again, so nothing an
upstream sends can become template syntax. Every substituted value goes through ``scrub`` (the
redactor), because every variable ultimately comes from the upstream or the agent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from proxy.policy.envelope.pointer import to_pointer

_EXPR = re.compile(r"\{\{(.*?)\}\}", re.S)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_-]+)*$")
_FILTER = re.compile(r"^([a-z_]+)(?:\((.*)\))?$", re.S)

Lookup = Callable[[str], Any]
Scrub = Callable[[str], str]


class TemplateError(ValueError):
    """A template that cannot be parsed; raised at load time only."""


def _as_int(value: Any) -> Any:
    try:
        return int(float(value))
    except (TypeError, ValueError, OverflowError):  # "1e999", "inf", "nan" from an upstream
        return None


def _ms(value: Any) -> Any:
    try:
        return max(0, round(float(value) * 1000))
    except (TypeError, ValueError, OverflowError):
        return None


#: Stays ``re`` (RE2 has no ``(?![a-z])``). ``(?<!\d)``: a number is only tried from its first
#: digit. Without it, findall tried every digit of a run, each backtracking over the rest: time
#: quadratic in an upstream's "1111…" (20,000 digits took 39 s). A start inside a run can only
#: reach the ends the run's first digit reached, so no match is lost, and each run is read once.
_DURATION_PART = re.compile(
    r"(?<!\d)(\d+(?:\.\d+)?)\s*"
    r"(ms|millis(?:econds?)?|s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?)(?![a-z])",
    re.I,
)
_UNIT_MS = {"ms": 1, "mi": 1, "s": 1000, "se": 1000, "m": 60_000, "h": 3_600_000}
_CLOCK = re.compile(r"^(?:(\d+):)?(\d{1,2}):(\d{1,2}(?:\.\d+)?)$")
_ISO = re.compile(r"^P(?:T)?(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?$", re.I)


def _duration(value: Any) -> Any:
    """Milliseconds from "7s", "3.6s", "20ms", "2 minutes", "1m30s", "00:00:59" or "PT30S";
    None for anything else, a number too large for a float ("9" * 400 s) included."""
    try:
        return _duration_ms(value)
    except (ValueError, OverflowError):
        return None


def duration_ms(value: Any) -> Any:
    """The ``duration`` filter, for code reading a wait as rules do
    (``policy/retry/stated_wait.py``)."""
    return _duration(value)


def _duration_ms(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _ms(value)
    if not isinstance(value, str):
        return None
    text = value.strip()
    if match := _CLOCK.match(text):
        hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
        return round((hours * 3600 + minutes * 60 + seconds) * 1000)
    if (match := _ISO.match(text)) and any(match.groups()):
        hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
        return round((hours * 3600 + minutes * 60 + seconds) * 1000)
    parts = _DURATION_PART.findall(text)
    if not parts:
        return _ms(text)  # a bare number is seconds, as in Retry-After
    total = 0.0
    for number, unit in parts:
        key = unit.lower()
        scale = _UNIT_MS["ms"] if key == "ms" or key.startswith("milli") else _UNIT_MS[key[0]]
        total += float(number) * scale
    return round(total)


def _first(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return value[0] if value else None
    return value


def _join(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return value


def _split(value: Any) -> Any:
    """ "GET, HEAD, POST" (Allow, Accept) -> ["GET", "HEAD", "POST"]."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def _camel(value: Any) -> Any:
    """``Items[0].Qty`` or ``/Items/0/Qty``: each segment's first letter lowercased (C#, Go)."""
    if not isinstance(value, str):
        return value
    return re.sub(r"(^|[/.\[])([A-Z])", lambda m: m.group(1) + m.group(2).lower(), value)


def _text(fn: Callable[[str], str]) -> Callable[[Any], Any]:
    return lambda v: fn(v) if isinstance(v, str) else v


_FILTERS: dict[str, Callable[[Any], Any]] = {
    "pointer": to_pointer,
    "int": _as_int,
    "ms": _ms,
    "duration": _duration,
    "lower": _text(str.lower),
    "upper": _text(str.upper),
    "first": _first,
    "join": _join,
    "split": _split,
    "camel": _camel,
    "json": lambda v: json.dumps(v, ensure_ascii=False, default=str),
}


@dataclass(frozen=True, slots=True)
class _Default:
    fallback: str

    def __call__(self, value: Any) -> Any:
        return self.fallback if value in (None, "", [], {}) else value


@dataclass(frozen=True, slots=True)
class _Ref:
    name: str
    filters: tuple[Callable[[Any], Any], ...]

    def value(self, lookup: Lookup) -> Any:
        value = lookup(self.name)
        for fn in self.filters:
            value = fn(value)
        return value


def _parse_filter(text: str) -> Callable[[Any], Any]:
    match = _FILTER.match(text.strip())
    if not match:
        raise TemplateError(f"bad filter {text.strip()!r}")
    name, arg = match.groups()
    if name == "default":
        if arg is None:
            raise TemplateError('default needs a value: default("...")')
        try:
            fallback = json.loads(arg)
        except json.JSONDecodeError as exc:
            raise TemplateError(f"default takes one quoted string, got {arg!r}") from exc
        return _Default(str(fallback))
    if arg is not None or name not in _FILTERS:
        known = ", ".join(sorted([*_FILTERS, "default"]))
        raise TemplateError(f"unknown filter {name!r} (known: {known})")
    return _FILTERS[name]


def _parse_ref(expr: str) -> _Ref:
    name, *filters = expr.split("|")
    name = name.strip()
    if not _NAME.match(name):
        raise TemplateError(f"bad variable name {name!r}")
    return _Ref(name, tuple(_parse_filter(f) for f in filters))


@dataclass(frozen=True, slots=True)
class Template:
    """Parsed template. A template that is exactly one ``{{ ref }}`` keeps the value's type."""

    source: str
    parts: tuple[str | _Ref, ...]

    @classmethod
    def parse(cls, source: str) -> Template:
        parts: list[str | _Ref] = []
        pos = 0
        for match in _EXPR.finditer(source):
            if match.start() > pos:
                parts.append(source[pos : match.start()])
            parts.append(_parse_ref(match.group(1)))
            pos = match.end()
        if pos < len(source):
            parts.append(source[pos:])
        literal = "".join(p for p in parts if isinstance(p, str))
        if "{{" in literal or "}}" in literal:
            raise TemplateError(f"unbalanced braces in {source!r}")
        return cls(source, tuple(parts))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parts if isinstance(p, _Ref))

    def render(self, lookup: Lookup, scrub: Scrub) -> Any:
        if len(self.parts) == 1 and isinstance(self.parts[0], _Ref):
            return scrub_value(self.parts[0].value(lookup), scrub)
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            value = part.value(lookup)
            if value is None:
                continue
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            out.append(scrub(text))
        return "".join(out)


def scrub_value(value: Any, scrub: Scrub) -> Any:
    """Scrub every string inside a JSON-like value, keeping its shape."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, Mapping):
        return {scrub(str(k)): scrub_value(v, scrub) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub_value(v, scrub) for v in value]
    return value


def compile_value(value: Any) -> Any:
    """Turn every string inside a literal YAML value into a Template (load time)."""
    if isinstance(value, str):
        return Template.parse(value) if "{{" in value or "}}" in value else value
    if isinstance(value, Mapping):
        return {k: compile_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [compile_value(v) for v in value]
    return value


def render_value(value: Any, lookup: Lookup, scrub: Scrub) -> Any:
    """Render a value made by ``compile_value``; literals are returned as written."""
    if isinstance(value, Template):
        return value.render(lookup, scrub)
    if isinstance(value, dict):
        return {k: render_value(v, lookup, scrub) for k, v in value.items()}
    if isinstance(value, list):
        return [render_value(v, lookup, scrub) for v in value]
    return value
