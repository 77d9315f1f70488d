"""Per documented operation, the error codes it can produce: for the error catalog.

Each documented error response (``4XX`` and ``default`` read as 400 and 500) is run through the
route's rules as mend would meet it: its JSON example when the document gives one, else an empty
body; the code of the rule that matches is what an agent gets. A route that validates requests
adds ``VALIDATION_FAILED`` for what mend refuses before the upstream.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Protocol

import orjson

from proxy.config.settings import Settings
from proxy.policy.evaluate import recorded_exchange
from proxy.policy.openapi.operations import Operation
from proxy.policy.openapi.spec import Spec

#: Operations listed per route (a generated document may have thousands).
MAX_LISTED = 500
_REFUSED = "VALIDATION_FAILED"


class _Store(Protocol):
    @property
    def engine(self) -> Any: ...

    @property
    def settings(self) -> Settings: ...


def _status(key: str) -> int | None:
    if key == "default":
        return 500
    if len(key) == 3 and key[0] in "45" and key[1:].upper() == "XX":
        return int(key[0]) * 100
    return int(key) if key.isdigit() and 400 <= int(key) <= 599 else None


def _example(spec: Spec, operation: Operation, key: str) -> bytes:
    """The documented JSON example of the operation's ``key`` response, or no body."""
    item = spec.document.data.get("paths", {}).get(operation.path, {})
    responses = item.get(operation.method.lower(), {}).get("responses", {})
    response = spec.document.deref(responses.get(key))
    content = response.get("content") if isinstance(response, Mapping) else None
    for media_type, media in (content or {}).items():
        if "json" in str(media_type) and isinstance(media, Mapping) and "example" in media:
            try:
                return orjson.dumps(media["example"])
            except TypeError:
                return b""
    return b""


def operation_codes(engine: Any, settings: Settings) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for route in settings.routes:
        spec: Spec | None = engine.specs.get(route.name)
        if spec is None:
            continue
        ruleset = engine.routes[route.name]
        for operation in spec.operations.all[:MAX_LISTED]:
            codes: dict[str, list[str]] = {}
            if route.validate_requests:
                codes["before_upstream"] = [_REFUSED]
            for key in operation.statuses:
                status = _status(key)
                if status is None:
                    continue
                body = _example(spec, operation, key)
                exchange = recorded_exchange(
                    status=status,
                    body=body,
                    headers={"Content-Type": "application/json"} if body else {},
                    method=operation.method,
                    path=operation.path,
                )
                exchange.route = route.name
                match = ruleset.match(exchange)
                if match is not None:
                    codes[key] = [match.rule.envelope.spec.code]
            out.append({"route": route.name, "operation": operation.describe(), "codes": codes})
    return out


class OperationCodes:
    """The list for the engine in force, rebuilt when a reload swaps the engine (in the
    reloading thread, through ``refresh``)."""

    def __init__(self, store: _Store) -> None:
        self.store = store
        self._built: tuple[Any, list[dict[str, Any]]] | None = None
        self._lock = threading.Lock()

    def get(self) -> list[dict[str, Any]]:
        built = self._built
        engine = self.store.engine
        if built is not None and built[0] is engine:
            return built[1]
        with self._lock:
            if self._built is None or self._built[0] is not engine:
                self._built = (engine, operation_codes(engine, self.store.settings))
            return self._built[1]

    def refresh(self, ok: bool, rules: int) -> None:
        if ok:
            self.get()
