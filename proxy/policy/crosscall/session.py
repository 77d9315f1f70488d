"""Which session a request belongs to (docs/contract.md §7).

The first configured session header present names it; else a keyed hash of the credential
header and the client address does. A raw credential is never kept: only its keyed BLAKE2b
hash, under a key that every replica sharing a store is given (``session.secret``). Session
names from headers are hashed too, so that what is stored and logged has a fixed, short size
whatever an agent sends.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping

from proxy.config.crosscall import SessionSettings

#: hex characters of a session id: 96 bits, no collision between agents in practice
_ID_CHARS = 24


class Sessions:
    def __init__(self, settings: SessionSettings) -> None:
        self.headers = settings.headers
        self.credentials = settings.credential_headers
        secret = settings.secret or secrets.token_hex(32)
        #: True: replicas do not agree on ids (no ``session.secret``): said once at start-up
        self.random_key = settings.secret is None
        # BLAKE2b takes a key of at most 64 bytes: a longer secret is hashed down to one
        self._key = hashlib.blake2b(secret.encode("utf-8")).digest()

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
        # keyed BLAKE2b is a MAC in its own right (RFC 7693), and far cheaper than HMAC over it
        data = kind + b"\x00" + text.encode("utf-8", "surrogatepass")
        return hashlib.blake2b(data, key=self._key, digest_size=_ID_CHARS // 2).hexdigest()
