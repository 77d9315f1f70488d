"""Which session a request belongs to (CONTRACT §7).

The first configured session header present names it; else a keyed hash of the credential header
and the client address does. A raw credential is never kept: only its HMAC, under a key that every
replica sharing a store is given (``session.secret``). Session names from headers are hashed
too, so that what is stored and logged has a fixed, short size whatever an agent sends.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping

from proxy.crosscall.config import SessionSettings

#: hex characters of a session id: 96 bits, no collision between agents in practice
_ID_CHARS = 24


class Sessions:
    def __init__(self, settings: SessionSettings) -> None:
        self.headers = settings.headers
        self.credentials = settings.credential_headers
        secret = settings.secret or secrets.token_hex(32)
        #: True: replicas do not agree on ids (no ``session.secret``): said once at start-up
        self.random_key = settings.secret is None
        self._key = secret.encode("utf-8")

    def identify(self, headers: Mapping[str, str], client: str | None) -> str:
        """The session id of a request: 24 hex characters, never the credential itself."""
        for name in self.headers:
            value = headers.get(name)
            if value:
                return self._digest(b"h", value)
        for name in self.credentials:
            value = headers.get(name)
            if value:
                return self._digest(b"c", f"{value}\x00{client or ''}")
        return self._digest(b"a", client or "")

    def _digest(self, kind: bytes, text: str) -> str:
        data = kind + b"\x00" + text.encode("utf-8", "surrogatepass")
        return hmac.new(self._key, data, hashlib.blake2b).hexdigest()[:_ID_CHARS]
