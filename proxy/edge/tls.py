"""The certificates mend's listeners serve to agents and operators, renewed without a restart.

For agents and the admin port (``tls_cert``/``tls_key``, ``admin_tls_cert``/``admin_tls_key``): a
``ListenerCertificate``. The listener keeps the context it started with; every handshake's
ClientHello (with or without SNI) switches the connection to the newest context loaded, so after
a reload new handshakes get the renewed certificate while open connections keep theirs. A reload
builds a whole new context and swaps it in only if every file loads: a half-written certificate,
or a key that does not match it, never replaces the one being served (``load_cert_chain`` on the
live context would leave it with the new certificate and no key). The files are read and checked
by ``proxy/config/certificates.py``, which also builds the contexts to upstreams.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter
from structlog.typing import FilteringBoundLogger

from proxy.config.certificates import KeyPair, TLSFileError, listener_pair, server_context
from proxy.config.settings import Settings


class _HasSettings(Protocol):
    @property
    def settings(self) -> Settings: ...


def reload_counter(registry: CollectorRegistry) -> Counter:
    return Counter(
        "mend_tls_reloads",
        "Reloads of a listener's certificate, by listener and result.",
        ["listener", "result"],
        registry=registry,
    )


class ListenerCertificate:
    """The certificate one listener serves (see the module's docstring); ``context`` is what the
    listener is opened with, ``reload`` renews what its new handshakes get."""

    def __init__(
        self,
        listener: str,
        pair: KeyPair,
        logger: FilteringBoundLogger,
        counter: Counter | None = None,
    ) -> None:
        self.listener = listener
        self.pair = pair
        self.log = logger
        self.counter = counter
        self.context, self._files = server_context(pair)  # TLSFileError: mend does not start
        self._current = self.context
        self.context.sni_callback = self._handshake

    @classmethod
    def for_listener(
        cls,
        settings: Settings,
        listener: str,
        logger: FilteringBoundLogger,
        counter: Counter | None = None,
    ) -> ListenerCertificate | None:
        """The ``agent`` or ``admin`` listener's certificate, None when it serves plain HTTP."""
        pair = listener_pair(settings, listener)
        return None if pair is None else cls(listener, pair, logger, counter)

    def _handshake(self, connection: ssl.SSLObject, _name: str | None, _: ssl.SSLContext) -> None:
        current = self._current
        if current is not self.context:
            connection.context = current

    def reload(self) -> bool:
        """Load the files again if they changed; on any problem keep serving the certificate in
        force, log why and count the failure. Whether the certificate in force is the files'."""
        try:
            files = self.pair.read()
            if files == self._files:
                return True
            context, files = server_context(self.pair)
        except TLSFileError as exc:
            self.log.error(
                "tls_reload_failed",
                listener=self.listener,
                setting=exc.setting,
                file=str(exc.path),
                reason=exc.reason,
                kept="the certificate in force",
            )
            if self.counter is not None:
                self.counter.labels(self.listener, "failure").inc()
            return False
        self._current, self._files = context, files
        self.log.info("tls_certificate_reloaded", listener=self.listener, cert=str(self.pair.cert))
        if self.counter is not None:
            self.counter.labels(self.listener, "success").inc()
        return True

    def on_reload(self, _ok: bool, _rules: int) -> None:
        """A ``RuleStore.on_reload`` listener: certificates reload with the rules, whether or
        not the rules did (a renewed certificate does not wait for a rule file to be fixed)."""
        self.reload()

    def follow(self, store: _HasSettings) -> Callable[[bool, int], None]:
        """A ``RuleStore.on_reload`` listener that also follows the files' paths in the settings
        in force (a reloaded ``--config`` may name new ones). A listener whose TLS the config
        removed keeps serving it until a restart (``config_restart_needed`` says so)."""

        def listener(ok: bool, rules: int) -> None:
            pair = listener_pair(store.settings, self.listener)
            if pair is not None:
                self.pair = pair
            self.on_reload(ok, rules)

        return listener
