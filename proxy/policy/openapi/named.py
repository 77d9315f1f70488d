"""The documented fields an upstream's message names, for an envelope that lists none.

Upstreams often say which field is wrong only in prose (``'status' is not one of ...``,
``Request body property petId must be integer``, ``qty must be at least 1``). With the route's
document, a name in the message that the operation documents (a body property at any depth a
path reaches, or a parameter) is that field. Only names set apart as field names are read: quoted,
after a word that introduces a field (property, parameter, field), or before one that judges it
(must, should, is required); a bare word elsewhere is not a field however it is spelt.
"""

from __future__ import annotations

from collections.abc import Callable

from proxy.policy.envelope.pointer import LOCATION_PREFIXES, to_pointer
from proxy.policy.regex import deferred

#: Characters of a message read.
MAX_MESSAGE = 500
#: Names tried per message, and fields kept.
_MAX_NAMES = 12
MAX_FIELDS = 5

_NAME = r"[A-Za-z_$][\w$.\[\]-]{0,63}"
_CANDIDATE = deferred(
    rf"['\"`](?P<quoted>{_NAME})['\"`]"
    rf"|(?i:property|parameter|field|attribute|key)\s+(?P<after>{_NAME})"
    rf"|(?P<before>{_NAME})\s+(?i:must|should|is required|is invalid|is not|cannot|may not)\b"
)


def named_fields(message: str, documented: Callable[[str], bool]) -> list[str]:
    """Pointers of the fields ``message`` names that ``documented`` knows, in order, distinct."""
    text = message[:MAX_MESSAGE]
    found: list[str] = []
    for _ in range(_MAX_NAMES):
        match = _CANDIDATE.search(text)
        if match is None:
            break
        groups = match.groupdict()
        name = groups["quoted"] or groups["after"] or groups["before"] or ""
        pointer = to_pointer(name.rstrip(".-"), LOCATION_PREFIXES)
        if pointer is not None and pointer not in found and documented(pointer):
            found.append(pointer)
            if len(found) == MAX_FIELDS:
                break
        text = text[max(match.end(), 1) :]
    return found
