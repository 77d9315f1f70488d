"""The HTTP answer a tool's failure reports: the status, headers and body of the API behind it.

Many MCP servers wrap a REST API and say so when a call fails, each in its own words:

- FastMCP's OpenAPI tools: ``HTTP error 422: Unprocessable Entity - {"detail": [...]}``;
- requests' ``raise_for_status``: ``422 Client Error: Unprocessable Entity for url: https://...``;
- httpx's: ``Client error '404 Not Found' for url 'https://...'``;
- Go clients (go-github, behind github-mcp-server): ``GET https://api.github.com/x: 404 Not Found``;
- axios: ``Request failed with status code 429``; hand-written servers: ``Backend answered 429 Too
  Many Requests. Retry-After: 7``, ``status_code=503``;
- a status in ``structuredContent`` (``{"status_code": 429, "headers": {...}, "body": ...}``), or a
  tool whose text is the API's own error document with its ``status`` (RFC 9457, Spring).

``reported`` finds one (RE2 over the first ``SCANNED`` characters; a number counts as a status
only after a word that says so, and only if a reason phrase, punctuation or the end follows it:
"returned 500 results" is no error); the policy evaluates it as if that API had answered mend
itself (``proxy/policy/evaluate.py``), keeping the tool as the operation. Only the response
headers a rule can use are read back (waits, rate limits, a challenge, the media type).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

import orjson
from multidict import CIMultiDict, CIMultiDictProxy

from proxy.policy import json_depth
from proxy.policy.exchange import NOT_JSON, Exchange
from proxy.policy.regex import deferred

#: Characters of a tool's text searched for a reported answer.
SCANNED = 64 << 10
#: Headers read back out of the text, at most this many, each value at most ``VALUE_MAX`` long.
MAX_HEADERS = 16
VALUE_MAX = 256

_STATUS = r"(?P<status>[45][0-9][0-9])"
#: Ways a wrapper says the status, each naming ``status`` (and ``method``/``url`` where it has
#: them), with whether the number may be a count ("returned 500 results") unless a reason phrase,
#: punctuation or the end follows it.
_SAID = tuple(
    (deferred(pattern), weak)
    for pattern, weak in (
        (
            rf"(?i)\b{_STATUS} (?:client|server) error: [^\n]{{0,200}}? for url: "
            r"(?P<url>\S{1,1000})",
            False,
        ),
        (
            rf"(?i)\b(?:client|server) error '{_STATUS}[^'\n]{{0,80}}' for url "
            r"'(?P<url>[^'\n]{1,1000})'",
            False,
        ),
        (
            r"\b(?P<method>GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS) "
            r"(?P<url>(?:https?://)?[^\s:]{1,1000})(?::[0-9]{1,5}[^\s:]{0,1000})?: "
            rf"{_STATUS}\b",
            False,
        ),
        (
            r"(?i)\b(?:http(?:/[0-9.]{1,3})?(?: error| status(?: code)?)?|"
            rf"status(?:[ _-]?code)?)[ \t]{{0,3}}[:=]?[ \t]{{0,3}}\(?{_STATUS}\b",
            False,
        ),
        (
            r"(?i)\b(?:answered|returned|responded|replied|failed)(?: with)?"
            r"(?: (?:an? )?(?:http )?(?:status|error|code))?(?: code)?[ \t]{1,3}[:=]?[ \t]{0,3}"
            rf"\(?{_STATUS}\b",
            True,
        ),
    )
)
_HEADER_NAMES = (
    "retry-after",
    "x-ratelimit-reset",
    "x-ratelimit-remaining",
    "x-ratelimit-limit",
    "x-rate-limit-reset",
    "x-rate-limit-remaining",
    "x-rate-limit-limit",
    "ratelimit-reset",
    "ratelimit-remaining",
    "ratelimit-limit",
    "ratelimit-policy",
    "ratelimit",
    "www-authenticate",
    "content-type",
)
_HEADER = deferred(
    rf"(?i)(?:^|[^a-z0-9-])(?P<name>{'|'.join(_HEADER_NAMES)})[\"']?[ \t]{{0,3}}[:=][ \t]{{0,3}}"
    rf"[\"']?(?P<value>[^\n\"']{{1,{VALUE_MAX}}})"
)
_HTTP_DATE = deferred(r"^[A-Z][a-z]{2}, [0-9]{2} [A-Z][a-z]{2} [0-9]{4} [0-9:]{8} GMT")
_NUMBER = deferred(r"^[0-9]{1,12}(?:\.[0-9]{1,6})?")
_BODY_MARK = deferred(r"(?i)\b(?:response body|body|response)[ \t]{0,3}[:=][ \t]{0,3}")
_STATUS_KEYS = ("status_code", "statusCode", "status", "http_status", "httpStatus")
_BODY_KEYS = ("body", "response", "detail", "error", "data")


@dataclass(frozen=True, slots=True)
class Reported:
    """An HTTP error answer a tool's failure reports, as the rules read one."""

    status: int
    text: str
    document: Any = NOT_JSON
    headers: Mapping[str, str] = field(default_factory=dict)
    #: the request the tool sent, when its words say (a path only: no host reaches a rule)
    method: str | None = None
    path: str | None = None
    #: the words quote the answer (a body, a header), not only its status
    quotes: bool = True

    @property
    def content_type(self) -> str:
        stated = self.headers.get("content-type")
        if stated:
            return stated.partition(";")[0].strip().lower()
        if self.document is not NOT_JSON:
            return "application/json"
        return "text/html" if self.text.lstrip()[:1] == "<" else "text/plain"


def reported(text: str, structured: Any = None) -> Reported | None:
    """The HTTP error answer ``text`` (a tool's failure) or its ``structured`` content reports;
    ``None``: it reports none. Its body is the document or text the words quote, else the words
    themselves (all there is of it)."""
    found = _from_document(structured, text) if isinstance(structured, dict) else None
    if found is not None:
        return found
    scanned = text[:SCANNED]
    found = _from_document(_whole_json(scanned), scanned)
    if found is not None:
        return found
    said = _said(scanned)
    if said is None:
        return None
    groups, end = said
    method, url = groups.get("method") or None, groups.get("url") or None
    body, headers = _body(scanned[end:]), _headers(scanned)
    return Reported(
        status=int(groups.get("status") or 0),
        text=body or _words(scanned),
        document=json_depth.loads(body) if body[:1] in ("{", "[") else NOT_JSON,
        headers=headers,
        method=method,
        path=_path(url) if url else None,
        quotes=bool(body or headers),
    )


#: The SDKs' prefix on a tool's error text (SDK 1.x/2.x, FastMCP): not the API's words.
_TOOL_PREFIX = deferred(r"^\s*Error (?:executing|calling) tool '?[^\s':]{1,200}'?: ")


def _words(text: str) -> str:
    """The tool's words without the SDK's "Error executing tool NAME: " prefix."""
    prefix = _TOOL_PREFIX.search(text)
    return (text[prefix.end() :] if prefix is not None else text).strip()


def _said(text: str) -> tuple[dict[str, str | None], int] | None:
    """Where ``text`` first states an error status, by the first wording that does: the
    wording's groups, and the end of the statement in ``text``."""
    for pattern, weak in _SAID:
        start = 0
        while (match := pattern.search(text[start:])) is not None:
            end = start + match.end()
            if not weak or _ends_a_status(text, end, int(match.group("status") or 0)):
                return match.groupdict(), end
            start = end
    return None


def _ends_a_status(text: str, end: int, status: int) -> bool:
    """Whether what follows a number makes it a status: nothing, punctuation, or the start of
    its reason phrase ("404 Not Found"; "500 results" is a count)."""
    rest = text[end : end + 40].lstrip(" ")
    if not rest or not rest[0].isalnum():
        return True
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        return rest[0].isupper()
    return rest.lower().startswith(phrase.split()[0].lower()) or rest[0].isupper()


def _body(after: str) -> str:
    """The answer's body in the words after its status: the JSON document there, else what
    follows a ``Body:`` mark or the reason phrase's separator."""
    start = min((i for i in (after.find("{"), after.find("[")) if i >= 0), default=-1)
    if start >= 0:
        end = max(after.rfind("}"), after.rfind("]"))
        candidate = after[start : end + 1] if end > start else ""
        document = json_depth.loads(candidate) if candidate else NOT_JSON
        if document is not NOT_JSON and document not in ({}, []):
            return candidate  # go-github's empty "[]" of errors quotes nothing
    mark = _BODY_MARK.search(after)
    if mark is not None:
        return after[mark.end() :].strip()
    _, sep, rest = after.partition(" - ")
    return rest.strip() if sep else ""


def _headers(text: str) -> dict[str, str]:
    """The response headers a rule can read, as ``text`` quotes them (first quote wins)."""
    out: dict[str, str] = {}
    start = 0
    while len(out) < MAX_HEADERS and (match := _HEADER.search(text[start:])) is not None:
        start += match.end()
        name = (match.group("name") or "").lower()
        value = _value(name, (match.group("value") or "").strip())
        if value and name not in out:
            out[name] = value
    return out


def _value(name: str, raw: str) -> str:
    """A quoted header's value alone: a number or HTTP-date for a wait, a media type, or the
    line (cut at a sentence's end) for the others."""
    if name == "content-type":
        return raw.split(maxsplit=1)[0].rstrip(".,;") if raw else ""
    if name == "www-authenticate":
        return raw
    date = _HTTP_DATE.search(raw)
    if date is not None:
        return date.group(0) or ""
    number = _NUMBER.search(raw)
    if number is not None and name not in {"ratelimit", "ratelimit-policy"}:
        return number.group(0) or ""
    return raw.rstrip(".")


def _path(url: str) -> str | None:
    """The path (and query) of ``url``: the host the tool called is its own business."""
    try:
        parts = urlsplit(url.rstrip(".,;)"))
    except ValueError:
        return None
    path = parts.path or "/"
    if not path.startswith("/"):
        return None
    return path + (f"?{parts.query}" if parts.query else "")


def _whole_json(text: str) -> Any:
    """The JSON object ``text`` is, when it is one (an API's own error document as the text)."""
    stripped = text.strip()
    return json_depth.loads(stripped) if stripped[:1] == "{" else NOT_JSON


def _from_document(document: Any, text: str) -> Reported | None:
    """An answer a JSON object states with a status member (4xx or 5xx). A wrapper (one with
    ``body``, ``response`` or ``headers``) holds the body in a member; any other object is the
    API's own error document (RFC 9457, Spring's), the body itself."""
    if not isinstance(document, dict):
        return None
    status = _status(document)
    if status is None:
        return None
    raw = document.get("headers")
    headers = _quoted_headers(raw) if isinstance(raw, dict) else {}
    wrapper = isinstance(raw, dict) or "body" in document or "response" in document
    body = next((document[k] for k in _BODY_KEYS if k in document), text) if wrapper else document
    if isinstance(body, str) and body.strip()[:1] in ("{", "["):
        parsed = json_depth.loads(body.strip())
        body = body if parsed is NOT_JSON else parsed
    if isinstance(body, dict | list):
        return Reported(status, orjson.dumps(body).decode(), body, headers)
    return Reported(status, str(body), NOT_JSON, headers)


def _quoted_headers(raw: dict[Any, Any]) -> dict[str, str]:
    return {
        str(name).lower(): str(value)[:VALUE_MAX]
        for name, value in list(raw.items())[:MAX_HEADERS]
        if str(name).lower() in _HEADER_NAMES and isinstance(value, str | int | float)
    }


def _status(document: dict[str, Any]) -> int | None:
    for key in _STATUS_KEYS:
        value = document.get(key)
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599:
            return value
    return None


def backend_exchange(tool_call: Exchange, answer: Reported) -> Exchange:
    """``answer`` as the exchange the rules read, as if the API behind the tool had answered
    mend itself: plain HTTP, its status, headers and body; the tool call (its name, method and
    arguments) kept, so that the tool is the operation."""
    return replace(
        tool_call,
        protocol="http",
        status=answer.status,
        headers=CIMultiDictProxy(CIMultiDict(answer.headers)),
        content_type=answer.content_type,
        text=answer.text,
        json=answer.document,
        truncated=False,
        queried={},
        method=answer.method or tool_call.method,
        path=answer.path or tool_call.path,
    )
