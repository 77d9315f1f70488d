"""What a rewritten error keeps of the upstream's headers (docs/contract.md §3, docs/headers.md).

An envelope replaces the upstream's body, not its answer: every header the upstream sent is kept
but those that describe the old body, belong to the connection, or name the upstream's
software. CORS (``Access-Control-*``, ``Vary``) is kept, or a browser-based agent could not read
the envelope at all; so are ``WWW-Authenticate``, ``Allow``, ``Retry-After``, rate limits,
``Link``, ``Set-Cookie``, caching and security headers, and any header of the API's own
(``X-More-Info``). As nginx's ``proxy_hide_header`` and Envoy's local replies, the list is of
what is dropped, each with its reason; ``docs/headers.md`` prints it (a test keeps the two in
step). What is kept is redacted (``proxy/runtime/envelope_steps.py``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from multidict import CIMultiDictProxy

from proxy.edge.forward import HOP_BY_HOP
from proxy.policy.redaction import is_internal_header

#: Why each header describing the upstream's body is dropped from an envelope in its place.
OF_THE_BODY: Mapping[str, str] = {
    "content-length": "the old body's length: the envelope's own is written",
    "content-type": "the old body's media type: the envelope's own is written",
    "content-encoding": "the old body's coding (gzip, br): the envelope is not encoded",
    "content-range": "the part of the old body sent (kept on a 416: there it names the "
    "resource's length, which the client needs to ask again)",
    "content-language": "the old body's language",
    "content-disposition": "how to present the old body (a file name)",
    "content-location": "the URL of the old body's representation",
    "content-md5": "a checksum of the old body",
    "content-digest": "a checksum of the old body (RFC 9530)",
    "repr-digest": "a checksum of the old representation (RFC 9530)",
    "digest": "a checksum of the old representation (RFC 3230)",
    "etag": "a validator of the old body: a client would send it back for a body it never got",
    "last-modified": "a validator of the old body, as ETag",
}
#: Why the other dropped headers are: the connection's (RFC 9110 §7.6.1), and mend's own.
OTHERS: Mapping[str, str] = {
    **{
        name: "hop-by-hop: belongs to the upstream's connection, not the agent's"
        for name in HOP_BY_HOP
    },
    "server": "the upstream's software: mend writes its own (as nginx and Envoy do)",
    "x-request-id": "mend writes the request's id",
    "x-error-code": "mend writes the envelope's code",
    "x-upstream-status": "mend writes it when the envelope's status differs",
}
#: Every header name dropped from an envelope, with why (besides those ``Connection`` names and
#: the upstream's software and internals: ``is_internal_header``).
DROPPED: Mapping[str, str] = {**OF_THE_BODY, **OTHERS}
#: The status on which ``Content-Range`` describes the resource, not the body (RFC 9110 §15.5.17).
RANGE_NOT_SATISFIABLE = 416


def kept(headers: CIMultiDictProxy[str], status: int) -> Iterator[tuple[str, str]]:
    """The upstream's headers an envelope keeps, in order, names as they were spelt."""
    named = {
        token.strip().lower()
        for value in headers.getall("Connection", ())
        for token in value.split(",")
    }
    for name, value in headers.items():
        lowered = name.lower()
        dropped = lowered in DROPPED or lowered in named or is_internal_header(lowered)
        if dropped and not (lowered == "content-range" and status == RANGE_NOT_SATISFIABLE):
            continue
        yield name, value
