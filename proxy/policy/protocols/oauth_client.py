"""Answers an OAuth client library reads, not a model: they pass as the server wrote them.

An authorization server's token, revocation, introspection and pushed-authorization endpoints
(RFC 6749 §5.2, RFC 7009, RFC 7662, RFC 9126) take form-encoded requests and answer an error as
a JSON object whose ``error`` is a string the client branches on (the MCP SDKs drop a refresh
token on ``invalid_grant`` and sign in again); dynamic client registration (RFC 7591 §3.2.2)
answers its own codes. Made an envelope, ``error`` would become an object and the client's OAuth
flow would stop where it goes on direct (docs/contract.md §6: authorization answers belong to the
client). A resource server's 401 and 403 are not these: an agent may read those, and the SDKs
act on their status and challenge only.
"""

from __future__ import annotations

from proxy.policy.exchange import Exchange

#: RFC 7591 §3.2.2: a registration endpoint's errors (its requests are JSON, not forms)
REGISTRATION_ERRORS = frozenset(
    {
        "invalid_redirect_uri",
        "invalid_client_metadata",
        "invalid_software_statement",
        "unapproved_software_statement",
    }
)


def reads_itself(exchange: Exchange) -> bool:
    """Whether an error answer is an OAuth endpoint's, for the client library to read."""
    body = exchange.json
    code = body.get("error") if isinstance(body, dict) else None
    if not isinstance(code, str):
        return False
    content_type = exchange.request_headers.get("Content-Type", "")
    form = content_type.lower().startswith("application/x-www-form-urlencoded")
    return form or code in REGISTRATION_ERRORS
