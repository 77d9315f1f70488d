"""What an agent may send instead, read from a validation message.

Frameworks say "ensure this value is less than or equal to 100", "must be one of: a, b",
"Input should be greater than 0". Turning those into ``allowed_values`` (JSON-Schema-like keywords)
and a ``suggested_value`` lets an agent repair a request without guessing.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable
from typing import Any

from proxy.policy.regex import deferred

_NUM = r"(-?\d+(?:\.\d+)?)"
#: A number of characters, items or digits is a length, not a value bound.
_UNIT = r"(?!\d|\.\d|\s*(?:char|item|element|byte|digit|decimal|place|letter|entr|word|file|value))"
_MIN = r"greater than or equal to|at least|no less than|>=|minimum(?: value)?(?: is| of)?"
_MAX = (
    r"less than or equal to|at most|no (?:more|greater) than|not exceed|<=|"
    r"maximum(?: value)?(?: is| of)?"
)
_MIN_LEN = r"at least|minimum of|minimum is|no fewer than|min(?:imum)? length(?: of| is)?"
_MAX_LEN = r"at most|no more than|not exceed|maximum of|maximum is|max(?:imum)? length(?: of| is)?"
_BOUNDS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.I), key)
    for p, key in (
        (rf"(?:{_MIN})\s*{_NUM}{_UNIT}", "minimum"),
        (rf"(?:{_MAX})\s*{_NUM}{_UNIT}", "maximum"),
        (rf"(?:greater than|more than|>|above)\s*{_NUM}{_UNIT}", "exclusiveMinimum"),
        (rf"(?:less than|fewer than|<|below)\s*{_NUM}{_UNIT}", "exclusiveMaximum"),
        (rf"(?:{_MIN_LEN})\s*{_NUM}\s*char", "minLength"),
        (rf"(?:{_MAX_LEN})\s*{_NUM}\s*char", "maxLength"),
        (rf"(?:at least|no fewer than)\s*{_NUM}\s*(?:item|element)", "minItems"),
        (rf"(?:at most|no more than)\s*{_NUM}\s*(?:item|element)", "maxItems"),
    )
)
_ENUM = re.compile(
    r"(?:one of(?: the (?:following|allowed|valid|permitted))?(?: values)?|must be either|"
    r"permitted(?: values)?(?: are)?|"
    r"allowed values?(?: are)?|valid (?:values|options|choices) (?:are|is)|expected(?: one of)?)"
    r"\s*[:\-]?\s*(.+)$",
    re.I,
)
#: pydantic v2 and others: "Input should be 'a', 'b' or 'c'".
_QUOTED_CHOICES = re.compile(
    r"(?:should|must) be ((?:(['\"`])[^'\"`]{1,64}\2(?:, | or |\s*\|\s*))+(['\"`])[^'\"`]{1,64}\3)"
)
#: "one of the allowed values" said without the values (ajv): no list to read.
_UNLISTED = re.compile(r"the (?:following|allowed|valid|permitted)(?: values)?\W*$", re.I)
#: Where a list of allowed values ends and the value that was sent begins.
_ENUM_END = re.compile(r"[,;.]?\s*(?:but |instead )?(?:received|got|given|found|was)\b.*$", re.I)
#: Rewrites that turn negated or two-sided phrasings into the ones the bounds below read.
_NOT = r"\b(?:(?:must|should|can|may|could|shall)\s*not|cannot|can't)\s+(?:be\s+)?"
_REWRITES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.I), r)
    for p, r in (
        (rf"{_NOT}(?:less|fewer|lower|smaller|shorter)\s+than", "at least"),
        (rf"{_NOT}(?:greater|more|larger|higher|bigger|longer)\s+than", "at most"),
        (rf"{_NOT}exceed", "at most"),
        (r"\bnon-?negative\b", "at least 0"),
        (r"\bnon-?positive\b", "at most 0"),
        (r"(?<!non-)(?<!non)\bpositive\b", "greater than 0"),
        (r"(?<!non-)(?<!non)\bnegative\b", "less than 0"),
    )
)
_BETWEEN = re.compile(
    rf"\bbetween\s*{_NUM}\s*(?:and|-|to)\s*{_NUM}(\s*(?:char|item|element))?", re.I
)
_LENGTHY = re.compile(r"\b(?:length|size|long|characters?)\b", re.I)
_WS = re.compile(r"\s+")
_REASON_LIMIT = 300
_ENUM_ITEM = re.compile(r"""['"`]([^'"`]{1,64})['"`]|([\w.\-]{1,64})""")
_CTX_KEYS = {
    "gt": "exclusiveMinimum",
    "ge": "minimum",
    "lt": "exclusiveMaximum",
    "le": "maximum",
    "min_length": "minLength",
    "max_length": "maxLength",
    "expected": "enum",
    "limit_value": None,
    "pattern": "pattern",
}


def _number(text: str) -> int | float:
    value = float(text)
    return int(value) if value.is_integer() else value


def _enum_values(text: str) -> list[str]:
    text = text.strip().rstrip(".")
    values = []
    for quoted, bare in _ENUM_ITEM.findall(text):
        value = quoted or bare
        if value.lower() in {"or", "and", "but", "got", "received", "not"}:
            continue
        values.append(value)
    return values[:50]


def _between(reason: str, found: dict[str, Any]) -> None:
    match = _BETWEEN.search(reason)
    if match is None:
        return
    low, high, unit = _number(match.group(1)), _number(match.group(2)), match.group(3) or ""
    if "item" in unit or "element" in unit:
        keys = ("minItems", "maxItems")
    elif "char" in unit or _LENGTHY.search(reason[: match.start()]):
        keys = ("minLength", "maxLength")
    else:
        keys = ("minimum", "maximum")
    found.setdefault(keys[0], low)
    found.setdefault(keys[1], high)


#: ``from_reason`` answers remembered by message (validation messages repeat); past this many
#: the table starts again, and a longer message is read every time.
REASONS_MAX = 2048
_REASON_KEY_MAX = 1024
_REASONS: dict[str, dict[str, Any] | None] = {}


def from_reason(reason: str) -> dict[str, Any] | None:
    """Allowed values named by a human-readable validation message, or ``None``; each message is
    read once (``REASONS_MAX``), and every caller gets its own copy."""
    if len(reason) > _REASON_KEY_MAX:
        return _from_reason(reason)
    try:
        found = _REASONS[reason]
    except KeyError:
        found = _REASONS[reason] = _from_reason(reason)
        if len(_REASONS) > REASONS_MAX:
            _REASONS.clear()
    if found is None:
        return None
    return {k: list(v) if isinstance(v, list) else v for k, v in found.items()}


def _from_reason(reason: str) -> dict[str, Any] | None:
    # One line of at most _REASON_LIMIT characters, as build passes it anyway: the patterns are
    # re (lookarounds, a backreference), and _ENUM (.+$ before a newline) and _ENUM_END (\s*
    # over a run of spaces) take time quadratic in longer or multi-line text.
    reason = _WS.sub(" ", reason).strip()[:_REASON_LIMIT]
    text = reason
    for pattern, replacement in _REWRITES:
        text = pattern.sub(replacement, text)
    found: dict[str, Any] = {}
    _between(text, found)
    for pattern, key in _BOUNDS:
        if (match := pattern.search(text)) and not any(
            k in found for k in (key, key.replace("exclusiveM", "m"))
        ):
            found[key] = _number(match.group(1))
    if found:
        return found
    if match := _QUOTED_CHOICES.search(reason):
        return {"enum": _enum_values(match.group(1))}
    if (match := _ENUM.search(reason)) and not _UNLISTED.search(reason):
        values = _enum_values(_ENUM_END.sub("", match.group(1)))
        if len(values) >= 2 or "one of" in reason.lower():
            return {"enum": values}
    return None


#: A reason that says the value is an integer.
_INTEGER = deferred(r"(?i)\b(?:integers?|whole numbers?|int(?:32|64)?)\b")


def from_context(ctx: Any) -> dict[str, Any] | None:
    """Allowed values from a structured context (pydantic's ``ctx``: ``{"gt": 0}``)."""
    if not isinstance(ctx, dict):
        return None
    out: dict[str, Any] = {}
    for key, value in ctx.items():
        mapped = _CTX_KEYS.get(key)
        if mapped == "enum" and isinstance(value, str):
            out["enum"] = _enum_values(value)
        elif mapped and isinstance(value, (int, float, str)):
            out[mapped] = value
    return out or None


def normalise(allowed: dict[str, Any], reason: str = "") -> dict[str, Any]:
    """Inclusive bounds for what the upstream says is an integer: ``> 0`` of "a positive
    integer" becomes ``minimum: 1``, as agents expect. Of anything else it stays
    ``exclusiveMinimum: 0``: pydantic says "greater than 0" of a float as of an int, a model
    writes ``-5`` for either, and ``minimum: 1`` would claim the field is an integer (``suggest``
    still offers 1 for an integer sent)."""
    out = dict(allowed)
    if _INTEGER.search(reason) is None:
        return out
    for exclusive, inclusive, step in (
        ("exclusiveMinimum", "minimum", 1),
        ("exclusiveMaximum", "maximum", -1),
    ):
        bound = out.get(exclusive)
        if isinstance(bound, int) and not isinstance(bound, bool) and inclusive not in out:
            out[inclusive] = bound + step
            del out[exclusive]
    return out


def suggest(allowed: dict[str, Any] | None, received: Any = None) -> Any:
    """A value inside ``allowed``, as close to what was sent as the constraint lets us say: an
    exclusive bound is stepped over for an integer sent (``> 0``: 1), and no number is offered
    for one that is not (any step would be a guess)."""
    if not allowed:
        return None
    enum = allowed.get("enum")
    if isinstance(enum, list) and enum:
        return _nearest_member(enum, received)
    integral = allowed.get("type") == "integer" or (
        isinstance(received, int) and not isinstance(received, bool)
    )
    low = _typed(_bound(allowed, "minimum", "exclusiveMinimum", 1, integral), integral, math.ceil)
    high = _typed(
        _bound(allowed, "maximum", "exclusiveMaximum", -1, integral), integral, math.floor
    )
    if isinstance(received, (int, float)) and not isinstance(received, bool):
        if (low is None and "exclusiveMinimum" in allowed) or (
            high is None and "exclusiveMaximum" in allowed
        ):
            return None  # a float past an exclusive bound: any step over it would be a guess
        return _clamped(received, low, high)
    return next((bound for bound in (low, high) if isinstance(bound, (int, float))), None)


def _typed(bound: Any, integral: bool, to_int: Callable[[float], int]) -> Any:
    """``bound`` as a value of an integer field when ``integral`` (``10.0`` is ``10``, a
    maximum of ``9.5`` is ``9``): a suggestion of the field's own type."""
    if integral and isinstance(bound, float) and math.isfinite(bound):
        return to_int(bound)
    return bound


def _bound(
    allowed: dict[str, Any], inclusive: str, exclusive: str, step: int, integral: bool
) -> Any:
    """The inclusive bound, or the exclusive one stepped over when integers are in play."""
    if inclusive in allowed:
        return allowed[inclusive]
    bound = allowed.get(exclusive)
    if isinstance(bound, int) and not isinstance(bound, bool) and integral:
        return bound + step
    return None


def _nearest_member(enum: list[Any], received: Any) -> Any:
    """The member ``received`` names (case aside) or is closest to; else the first member."""
    if isinstance(received, str):
        lowered = {str(v).lower(): v for v in enum}
        if received.lower() in lowered:
            return lowered[received.lower()]
        close = difflib.get_close_matches(received, [str(v) for v in enum], n=1, cutoff=0.5)
        if close:
            return close[0]
    return enum[0]


def _clamped(received: float, low: Any, high: Any) -> Any:
    """The bound ``received`` is past, or ``None`` when it is within both."""
    if isinstance(low, (int, float)) and received < low:
        return low
    if isinstance(high, (int, float)) and received > high:
        return high
    return None
