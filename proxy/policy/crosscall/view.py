"""The cross-call view as the proxy sees it: one collaborator made from the settings."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from structlog.typing import FilteringBoundLogger

from proxy.config.crosscall import CircuitSettings, SessionSettings, StateSettings
from proxy.policy.crosscall.circuit import Circuits
from proxy.policy.crosscall.guard import Guard
from proxy.policy.crosscall.memory import MemoryStore
from proxy.policy.crosscall.patterns import load_suggestions
from proxy.policy.crosscall.review import Review
from proxy.policy.crosscall.store import StateStore


def make_store(state: StateSettings) -> StateStore:
    if state.is_redis:
        from proxy.policy.crosscall.redis_store import RedisStore  # noqa: PLC0415 (only when used)

        return RedisStore(state.url, timeout_ms=state.timeout_ms)
    return MemoryStore(state.max_entries)


class CrossCall:
    def __init__(
        self,
        session: SessionSettings,
        state: StateSettings,
        circuit: CircuitSettings,
        registry: CollectorRegistry,
        logger: FilteringBoundLogger,
        store: StateStore | None = None,
    ) -> None:
        self.store = store or make_store(state)
        guard = Guard(state.timeout_ms, state.error_log_interval_s, registry, logger)
        guard.bounded = state.is_redis
        self.review = Review(session, self.store, guard, load_suggestions())
        self.circuits = Circuits(
            circuit, self.store, guard, registry, logger, shared=state.is_redis
        )
        if state.is_redis and self.review.sessions.random_key:
            logger.warning(
                "session_secret_unset",
                detail="replicas sharing the state store need the same session.secret "
                "(or MEND_SESSION_SECRET); without it each names sessions its own way",
            )

    async def close(self) -> None:
        await self.store.close()
