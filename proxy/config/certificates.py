"""The TLS files the settings name, read and checked: upstream client contexts and key pairs.

To upstreams (``Route.tls``): one ``ssl.SSLContext`` per route, built at load. The system's CAs,
or ``ca_file`` instead of them (as curl's ``--cacert`` and Envoy's ``trusted_ca``); a client
certificate for mutual TLS; ``server_name`` for SNI and the certificate's name check (aiohttp's
``server_hostname``). ``verify: false`` accepts any certificate and is logged as a warning. A route
with no ``tls:`` block uses aiohttp's default context (the system's CAs), as before. The
listeners' certificates, renewed while serving, are ``proxy/edge/tls.py``'s.

Every file problem is a ``TLSFileError`` naming the setting, the file and the reason in an
operator's words: one ``mend: error:`` line at start, a logged and counted failure at reload.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from proxy.config.route import Route, UpstreamTLS
from proxy.config.settings import Settings

#: The one application protocol mend speaks, offered and accepted in ALPN (as aiohttp's client).
ALPN = ("http/1.1",)


class TLSFileError(Exception):
    """A certificate, key or CA file mend cannot use: the setting that names it, the file, why."""

    def __init__(self, setting: str, path: Path, reason: str) -> None:
        super().__init__(f"{setting} {path}: {reason}")
        self.setting = setting
        self.path = path
        self.reason = reason


class _EncryptedKey(Exception):
    pass


def _no_password() -> NoReturn:
    # without a callback OpenSSL would prompt for the password on the terminal, and wait
    raise _EncryptedKey


def _read(setting: str, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TLSFileError(setting, path, exc.strerror or type(exc).__name__) from None


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A certificate file and its key file (the same file when the key is in it), by setting."""

    cert_setting: str
    cert: Path
    key_setting: str
    key: Path | None

    @property
    def key_file(self) -> tuple[str, Path]:
        """The setting and the file the key is read from."""
        if self.key is None:
            return self.cert_setting, self.cert
        return self.key_setting, self.key

    def read(self) -> tuple[bytes, bytes]:
        """Both files' bytes, checked for what they must contain, so an error names the one at
        fault (OpenSSL says "PEM lib" for either)."""
        cert = _read(self.cert_setting, self.cert)
        if b"-----BEGIN CERTIFICATE-----" not in cert:
            raise TLSFileError(self.cert_setting, self.cert, "no PEM certificate in it")
        key = cert if self.key is None else _read(*self.key_file)
        if b"PRIVATE KEY-----" not in key:
            raise TLSFileError(*self.key_file, "no PEM private key in it")
        return cert, key

    def load_into(self, context: ssl.SSLContext) -> None:
        try:
            context.load_cert_chain(self.cert, self.key, password=_no_password)
        except _EncryptedKey:
            reason = "the key is encrypted; mend reads unencrypted keys only"
            raise TLSFileError(*self.key_file, reason) from None
        except ssl.SSLError as exc:
            if exc.reason == "KEY_VALUES_MISMATCH":
                reason = f"the key does not match the certificate in {self.cert}"
                raise TLSFileError(*self.key_file, reason) from None
            raise TLSFileError(self.cert_setting, self.cert, _ssl_reason(exc)) from None
        except OSError as exc:  # read a moment ago: replaced or removed since
            raise TLSFileError(self.cert_setting, self.cert, exc.strerror or str(exc)) from None


def _ssl_reason(exc: ssl.SSLError) -> str:
    return (exc.reason or str(exc)).lower().replace("_", " ")


# --- to upstreams -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClientTLS:
    """What one route's session uses to reach its upstream over TLS."""

    context: ssl.SSLContext
    #: sent in SNI and checked in the certificate instead of the URL's host (None: the host)
    server_name: str | None


def client_context(tls: UpstreamTLS, where: str) -> ssl.SSLContext:
    """The context for a route's ``tls:`` block; ``where`` names it in errors (``TLSFileError``)."""
    if tls.ca_file is not None:
        _read(f"{where}.ca_file", tls.ca_file)
        try:
            context = ssl.create_default_context(cafile=tls.ca_file)  # instead of the system's
        except ssl.SSLError as exc:
            empty = exc.reason == "NO_CERTIFICATE_OR_CRL_FOUND"
            reason = "no PEM certificate in it" if empty else _ssl_reason(exc)
            raise TLSFileError(f"{where}.ca_file", tls.ca_file, reason) from None
        except OSError as exc:
            raise TLSFileError(f"{where}.ca_file", tls.ca_file, exc.strerror or str(exc)) from None
    else:
        context = ssl.create_default_context()
    if not tls.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if tls.cert_file is not None:
        pair = KeyPair(f"{where}.cert_file", tls.cert_file, f"{where}.key_file", tls.key_file)
        pair.read()
        pair.load_into(context)
    context.set_alpn_protocols(ALPN)
    return context


def client_tls(routes: Iterable[Route]) -> dict[str, ClientTLS]:
    """Each route with a ``tls:`` block, by name, with its context; ``TLSFileError`` on a file
    mend cannot use. (``verify: false`` is warned about where a configuration comes into
    force: ``proxy/runtime/generation.py``.)"""
    return {
        route.name: ClientTLS(
            client_context(route.tls, f"routes[{route.name}].tls"), route.tls.server_name
        )
        for route in routes
        if route.tls is not None
    }


def listener_pair(settings: Settings, listener: str) -> KeyPair | None:
    prefix = "admin_" if listener == "admin" else ""
    cert: Path | None = getattr(settings, f"{prefix}tls_cert")
    key: Path | None = getattr(settings, f"{prefix}tls_key")
    return None if cert is None else KeyPair(f"{prefix}tls_cert", cert, f"{prefix}tls_key", key)


def server_context(pair: KeyPair) -> tuple[ssl.SSLContext, tuple[bytes, bytes]]:
    files = pair.read()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    pair.load_into(context)
    context.set_alpn_protocols(ALPN)
    return context, files


def check_files(settings: Settings) -> list[TLSFileError]:
    """Load every certificate, key and CA file the settings name, as serving would: the problems,
    one per setting at fault, so that mend can refuse to start on all of them at once."""
    problems: list[TLSFileError] = []
    for route in settings.routes:
        try:
            client_tls([route])
        except TLSFileError as exc:
            problems.append(exc)
    for listener in ("agent", "admin"):
        if (pair := listener_pair(settings, listener)) is not None:
            try:
                server_context(pair)
            except TLSFileError as exc:
                problems.append(exc)
    return problems
