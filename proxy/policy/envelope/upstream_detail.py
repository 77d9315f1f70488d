"""What the upstream said about an error, kept when only a status fallback explains it.

Two things a fallback would otherwise throw away:

* a small structured detail: FastAPI's ``HTTPException(409, detail={"code": "item_locked",
  "lock_holder": "ana", "unlock_at": "..."})``. Its scalar members (at most ``MAX_MEMBERS``, each
  string at most ``MAX_STRING`` characters, ``MAX_BYTES`` in all) become ``upstream_detail``, and
  a one-line summary of it the message. Members whose names say they hold internals (stack,
  trace, exception, SQL...) are dropped; every string goes through the redactor by the caller.
* the human sentence of a framework's HTML error page whose title is only the status line:
  Werkzeug's ``<title>401 Unauthorized</title><h1>Unauthorized</h1><p>Bad credentials</p>``
  (Flask ``abort(401, description="Bad credentials")``) says "Bad credentials", not its title.
"""

from __future__ import annotations

import re
from http import HTTPStatus
from typing import Any

import orjson

from proxy.policy.regex import deferred

MAX_MEMBERS = 12
MAX_STRING = 200
MAX_BYTES = 1024

#: Members never kept: they hold internals, not something an agent acts on.
_INTERNAL_NAMES = frozenset(
    {
        "stack",
        "stacktrace",
        "stack_trace",
        "trace",
        "traceback",
        "backtrace",
        "exception",
        "exc_info",
        "file",
        "filename",
        "line",
        "lineno",
        "sql",
        "query",
        "debug",
        "cause",
        "internal",
        "innererror",
        "inner_error",
    }
)
#: The same, for a name that is not ASCII (RE2's case folding: U+017F, the long s, is an s)
_INTERNAL = deferred(rf"(?i)^(?:{'|'.join(sorted(_INTERNAL_NAMES))})$")
#: Members that name the error; the summary leads with the first one present.
_LEADS = ("code", "error", "error_code", "errorCode", "type", "reason", "status_text")
#: A message that is only an identifier ("item_locked", "E_LOCKED"), not a sentence. ``re``,
#: not RE2: one bounded character class cannot backtrack, and RE2's wrapper costs more per call.
_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]{0,63}")
#: Members every error body has: a detail of only these says nothing the message does not.
_PLAIN = frozenset(
    {
        "message",
        "msg",
        "detail",
        "title",
        "description",
        "error",
        "error_description",
        "status",
        "statusCode",
        "status_code",
        "documentation_url",
        "timestamp",
        "path",
        "instance",
        "request_id",
        "requestId",
        "success",
        "ok",
        "name",
    }
)
#: Where frameworks put a structured detail: FastAPI ``detail``, many ``error``, else the body.
_CONTAINERS = ("detail", "error", "errors")

#: Werkzeug / Flask's error page: the paragraph after the heading is the description.
_PARAGRAPH = deferred(r"(?is)<h1[^>]*>([^<]{1,120})</h1>\s*<p[^>]*>([^<]{1,400})</p>")
_STATUS_LINE = deferred(r"^\s*(\d{3})?\s*([A-Za-z][A-Za-z' -]{0,60}?)\s*$")


def _container(document: Any) -> dict[str, Any] | None:
    if not isinstance(document, dict):
        return None
    for key in _CONTAINERS:
        inner = document.get(key)
        if isinstance(inner, dict):
            return inner
    return document


def structured(document: Any, status: int | None = None) -> dict[str, Any] | None:
    """The small scalar members of the body's detail object, capped; ``None`` when there are
    none beyond a lone message (the message carries that already). A number equal to the HTTP
    ``status`` (``"code": 401``) says nothing the envelope does not."""
    container = _container(document)
    if container is None:
        return None
    kept: dict[str, Any] = {}
    for key, value in container.items():
        if len(kept) >= MAX_MEMBERS:
            break
        if not isinstance(key, str) or len(key) > 64 or _internal(key):
            continue
        if isinstance(value, str):
            if not value.strip() or len(value) > MAX_STRING:
                continue
        elif not (value is None or isinstance(value, (bool, int, float))) or (
            value == status and not isinstance(value, bool)
        ):
            continue
        kept[key] = value
    while kept and len(orjson.dumps(kept)) > MAX_BYTES:
        kept.popitem()
    if not kept or set(kept) <= _PLAIN:
        return None
    return kept


def _internal(key: str) -> bool:
    """Whether a member's name says it holds internals; an ASCII name without a regex (its
    case folds only to ASCII, so lowering it is what RE2's ``(?i)`` does)."""
    if key.isascii():
        return key.lower() in _INTERNAL_NAMES
    return _INTERNAL.search(key) is not None


def is_token(message: str) -> bool:
    """Whether ``message`` is a bare identifier rather than a sentence."""
    return _TOKEN.fullmatch(message) is not None


def summary(detail: dict[str, Any]) -> str | None:
    """``{"code": "item_locked", "lock_holder": "ana"}`` -> ``item_locked (lock_holder: ana)``;
    ``None`` when no member names the error."""
    lead_key = next((k for k in _LEADS if isinstance(detail.get(k), str)), None)
    if lead_key is None:
        return None
    rest = ", ".join(
        f"{k}: {'null' if v is None else str(v).lower() if isinstance(v, bool) else v}"
        for k, v in detail.items()
        if k != lead_key
    )
    return f"{detail[lead_key]} ({rest})" if rest else str(detail[lead_key])


def html_description(text: str, status: int | None) -> str | None:
    """The description paragraph of an error page whose heading is only the status's name."""
    match = _PARAGRAPH.search(text)
    if match is None:
        return None
    heading = _STATUS_LINE.search(match.group(1) or "")
    if heading is None or not _is_reason(heading.group(2) or "", status):
        return None
    return (match.group(2) or "").strip() or None


def _is_reason(name: str, status: int | None) -> bool:
    if status is None:
        return False
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        return False
    return name.strip().lower() == phrase.lower()
