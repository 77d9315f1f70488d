"""Reading the shapes an error arrives in: a JSON document, an HTML page, an XML fault.

Plain searches and one-class or bounded patterns only: every function here is linear in the body.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from typing import Any

#: a body that is markup (then it is read as text between tags)
MARKUP = re.compile(
    r"(?i)<\s*(?:!doctype|html|head|body|title|div|p|pre|table|h\d"
    r"|br|span|center|hr|\?xml|soap|faultstring|script|style)\b"
)
#: an HTML page (not an XML document): its debug-page signs are wider
HTML = re.compile(r"(?i)<\s*(?:!doctype\s+html|html|body)\b")
#: an XML error document's message element: the one thing worth reading in it
XML_MESSAGE = re.compile(
    r"(?is)<((?:[\w.-]{1,40}:)?(?:message|faultstring|errormessage|error_message|description"
    r"|error_description|detail|reason))\b[^<>]{0,200}>([^<]{1,2000}?)</\1\s*>"
)
_BLOCK_TAG = re.compile(
    r"(?i)<\s*(?:br|hr|p|div|tr|li|h\d|pre|table)\b[^<>]{0,2000}>"
    # any closing tag except inline ones: in XML every element is its own line
    r"|</\s*(?!(?:a|b|i|em|strong|span|code|small|abbr|font|u|sup|sub)\b)[\w:.-]{1,100}\s*>"
)
_TAG = re.compile(r"<[^<>]{0,2000}>")

#: the keys whose string is a JSON error document's message, most telling first
MESSAGE_KEYS = (
    *("message", "error_description", "detail", "title", "msg", "errormessage"),
    *("error_message", "description", "reason", "faultstring", "status_message", "error"),
    *("errors", "fault", "statustext"),
)


def strip_markup(body: str) -> str:
    """The text of a page: comments, scripts, styles and the head gone; blocks on lines."""
    body = cut_between(body, "<!--", "-->")
    for tag in ("script", "style", "textarea", "head"):
        body = cut_element(body, tag)
    body = _BLOCK_TAG.sub("\n", body)
    body = _TAG.sub(" ", body)
    return html.unescape(body)


def message_of(document: Any, depth: int = 0) -> str | None:
    """The first message-like string of a JSON error document."""
    if depth > 4:
        return None
    if isinstance(document, str):
        return document
    if isinstance(document, list):
        return _first_message(document[:3], depth + 1)
    if not isinstance(document, dict):
        return None
    by_lower = {str(key).lower(): value for key, value in document.items()}
    return _first_message((by_lower.get(key) for key in MESSAGE_KEYS), depth + 1, keyed=True)


def _first_message(values: Iterable[Any], depth: int, *, keyed: bool = False) -> str | None:
    """The first message among ``values`` (a list's items, or an object's message keys in
    order, where only a non-blank string or a container counts)."""
    for value in values:
        if keyed and isinstance(value, str):
            if value.strip():
                return value
            continue
        if keyed and not isinstance(value, (dict, list)):
            continue
        found = message_of(value, depth)
        if found:
            return found
    return None


def cut_between(body: str, opener: str, closer: str) -> str:
    """``body`` without every ``opener ... closer`` span (an unclosed one runs to the end)."""
    parts: list[str] = []
    position = 0
    while True:
        start = body.find(opener, position)
        if start < 0:
            parts.append(body[position:])
            return "".join(parts)
        parts.append(body[position:start])
        end = body.find(closer, start + len(opener))
        if end < 0:
            return "".join(parts)
        position = end + len(closer)


def cut_element(body: str, tag: str) -> str:
    """Drop ``<tag ...>...</tag>`` elements, found by plain search so that it stays linear."""
    lowered = body.lower()
    parts: list[str] = []
    position = 0
    opener, closer = f"<{tag}", f"</{tag}"
    while True:
        start = lowered.find(opener, position)
        if start < 0:
            parts.append(body[position:])
            return "".join(parts)
        parts.append(body[position:start])
        end = lowered.find(closer, start + len(opener))
        if end < 0:
            return "".join(parts)
        close = lowered.find(">", end)
        position = len(body) if close < 0 else close + 1
