"""Header names as the upstream spelt them (docs/headers.md, "Case").

HTTP field names are case-insensitive, but what reaches the agent should be what was sent:
uvicorn, h11 and hypercorn send ``content-type``, ``date``, ``server``; a client that prints the
head (httpx's CLI) shows the difference. Every name mend passes keeps its bytes already
(``CIMultiDict`` keeps the case of the names it is given); only a field that mend or aiohttp
writes anew, in the upstream's place (its length or framing, ``Date``, ``Server``, a rewritten
``Location``, an envelope's ``Content-Type``), took the writer's spelling. ``spelling`` notes,
for those names alone, how the upstream wrote them when that is not the usual spelling, and
``respelt`` puts that spelling back just before the head is written.

The cost on a response: one ``lower()`` and a set look-up per upstream header name; nothing more
unless the upstream spells one of these names its own way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from multidict import CIMultiDict

#: The names mend or aiohttp write anew on a response, in their usual spelling: a response's
#: framing and date, mend's ``Server`` and request id, a rewritten redirect or challenge, the
#: headers every envelope gets (``proxy/runtime/envelope_steps.py``), a tunnel's switch.
WRITTEN = {
    name.lower(): name
    for name in (
        "Allow",
        "Connection",
        "Content-Length",
        "Content-Location",
        "Content-Type",
        "Date",
        "Location",
        "Refresh",
        "Retry-After",
        "Server",
        "Transfer-Encoding",
        "Upgrade",
        "Vary",
        "WWW-Authenticate",
        "X-Request-ID",
    )
}

#: No name spelt otherwise (most upstreams): nothing to put back.
USUAL: Mapping[str, str] = {}


def spelling(names: Iterable[str]) -> Mapping[str, str]:
    """Of the names mend writes anew (``WRITTEN``), those ``names`` spell otherwise than usual:
    lower case -> the upstream's spelling (the first, if it sent the name twice)."""
    found: dict[str, str] | None = None
    for name in names:
        lowered = name.lower()
        usual = WRITTEN.get(lowered)
        if usual is not None and usual != name:
            if found is None:
                found = {}
            found.setdefault(lowered, name)
    return found if found is not None else USUAL


def respelt(headers: CIMultiDict[str], spelt: Mapping[str, str]) -> CIMultiDict[str]:
    """``headers`` in the same order, each name in ``spelt`` written as it spells it."""
    if not spelt:
        return headers
    return CIMultiDict((spelt.get(name.lower(), name), value) for name, value in headers.items())
