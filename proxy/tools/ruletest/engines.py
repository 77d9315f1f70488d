"""The engines cases run on (their rules, the packs, the fallbacks) and one response replayed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxy.config.choices import ProtocolName
from proxy.config.redaction import RedactionSettings
from proxy.config.route import Route
from proxy.config.settings import PACKAGED_RULES, Settings
from proxy.config.yamlfile import RuleError
from proxy.policy.envelope.build import BuildOptions
from proxy.policy.evaluate import (
    Answer,
    Evaluation,
    agent_redactor,
    answer_exchange,
    evaluate,
    recorded_exchange,
)
from proxy.policy.exchange import Exchange
from proxy.policy.protocols.detect import Detector, default_protocols
from proxy.policy.redaction import Redactor
from proxy.policy.rules.ruleengine import Engine
from proxy.policy.rules.ruleset import RuleSet
from proxy.tools.ruletest.cases import Case, RequestSpec, ResponseSpec

#: The upstream of the throw-away route cases run on; nothing ever connects to it.
_NOWHERE = "http://127.0.0.1:9"


def _is_pack(path: Path) -> bool:
    resolved, packs = path.resolve(), PACKAGED_RULES.resolve()
    return packs in (resolved, resolved.parent)


def engine_settings(
    rules: Sequence[Path],
    *,
    default_packs: bool = True,
    success_rules: Sequence[str] = (),
    redaction: RedactionSettings | None = None,
) -> Settings:
    """Settings for an offline engine: ``rules`` first, then (unless told not to) the packs.

    A shipped pack named in ``rules`` is not loaded twice when the packs are loaded anyway.
    """
    extra = tuple(p for p in rules if not (default_packs and _is_pack(p)))
    route = Route(name="default", upstream=_NOWHERE, success_rules=tuple(success_rules))
    return Settings(
        routes=(route,),
        rules=extra,
        default_packs=default_packs,
        redaction=redaction or RedactionSettings(),
    )


@dataclass
class Engines:
    """Engines by configuration, each loaded once; a configuration that fails stays failed."""

    extra_rules: tuple[Path, ...] = ()
    default_packs: bool = True
    _cache: dict[tuple[Any, ...], Engine | RuleError] = field(default_factory=dict)

    def get(
        self,
        rules: Sequence[Path] = (),
        success_rules: Sequence[str] = (),
        redaction: RedactionSettings | None = None,
    ) -> Engine:
        paths = (*rules, *self.extra_rules)
        key = (tuple(p.resolve() for p in paths), tuple(success_rules), redaction)
        if key not in self._cache:
            try:
                settings = engine_settings(
                    paths,
                    default_packs=self.default_packs,
                    success_rules=success_rules,
                    redaction=redaction,
                )
                self._cache[key] = Engine.load(settings)
            except RuleError as exc:
                self._cache[key] = exc
        found = self._cache[key]
        if isinstance(found, RuleError):
            raise found
        return found

    def answer(self, case: Case, base: Path) -> Answer | None:
        """What the proxy answers a case's response (``base``: the case file's folder, where
        its ``rules`` are); ``RuleError`` when they do not load. The case has a response."""
        assert case.response is not None
        engine = self.get([base / r for r in case.rules], case.route.success_rules, case.redaction)
        exchange = exchange_for(case.request, case.response)
        redactor = engine.redactor_for("default")
        ruleset = engine.routes["default"]
        return run_protocol(ruleset, exchange, case.protocol, case.request, redactor)


def run_exchange(ruleset: RuleSet, exchange: Exchange) -> Evaluation | None:
    """What the proxy would answer: ``None`` means the response passes through untouched."""
    return evaluate(ruleset, exchange, agent_redactor(), BuildOptions())


def run_protocol(
    ruleset: RuleSet,
    exchange: Exchange,
    protocol: ProtocolName,
    request: RequestSpec,
    redactor: Redactor | None = None,
) -> Answer | None:
    """``run_exchange`` in the agent's protocol, as the proxy answers a response it read (with
    ``redactor``, the route's, when the case adds to redaction)."""
    detector = Detector(default_protocols())
    call = detector.offline(
        protocol,
        method=request.method,
        query_string=request.query,
        headers=request.headers,
        body=request.raw_body(),
    )
    redactor = redactor or agent_redactor()
    return answer_exchange(ruleset, exchange, call, detector, redactor, BuildOptions())


def replay(
    engines: Engines,
    response: Mapping[str, Any],
    request: Mapping[str, Any] | None = None,
    success_rules: Sequence[str] = (),
    protocol: ProtocolName | str = ProtocolName.HTTP,
) -> Evaluation | None:
    """A recorded response (a case's ``response:`` mapping) through the shipped packs; in a
    protocol, the envelope of its first error."""
    spec = RequestSpec.model_validate(request or {})
    exchange = exchange_for(spec, ResponseSpec.model_validate(response))
    ruleset = engines.get(success_rules=success_rules).routes["default"]
    answered = run_protocol(ruleset, exchange, ProtocolName(protocol), spec)
    return answered.evaluations[0] if answered is not None else None


def exchange_for(request: RequestSpec, response: ResponseSpec) -> Exchange:
    body, headers = response.raw()
    exchange = recorded_exchange(
        status=response.status,
        body=body,
        headers=headers,
        method=request.method,
        path=request.path,
        request_headers=request.headers,
    )
    exchange.retry_safe = request.retry_safe
    return exchange
