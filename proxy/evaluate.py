"""Match and build, without the network: shared by the proxy, ``mend test`` and ``mend explain``.

Keeping this one function the only way from an exchange to an envelope means that what the rule
tests and explanations show is exactly what agents get.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from multidict import CIMultiDict, CIMultiDictProxy

from proxy import body as bodies
from proxy.build import BuildOptions, build
from proxy.envelope import Envelope
from proxy.exchange import Exchange
from proxy.redact import Redactor
from proxy.ruleset import Match, RuleSet


def agent_redactor() -> Redactor:
    """The redactor for agent-facing text, everywhere an envelope is built.

    ``neutral=""``: a value that is all internals becomes empty, so the envelope falls back to
    its own default sentence instead of splicing a stock phrase into a template.
    """
    return Redactor(neutral="")


@dataclass(slots=True)
class Evaluation:
    envelope: Envelope
    match: Match
    redactions: list[str] = field(default_factory=list)


def rewrite(
    match: Match, exchange: Exchange, redactor: Redactor, options: BuildOptions
) -> Evaluation:
    """The envelope for a matched exchange; every upstream-derived value is scrubbed."""
    kinds: list[str] = []

    def scrub(text: str) -> str:
        scrubbed = redactor.scrub(text)
        kinds.extend(scrubbed.kinds)
        return scrubbed.text

    envelope = build(match.rule.envelope, match.rule.id, exchange, match.found, scrub, options)
    return Evaluation(envelope, match, kinds)


def evaluate(
    ruleset: RuleSet, exchange: Exchange, redactor: Redactor, options: BuildOptions
) -> Evaluation | None:
    match = ruleset.match(exchange)
    return None if match is None else rewrite(match, exchange, redactor, options)


def recorded_exchange(
    *,
    status: int,
    body: bytes,
    headers: Mapping[str, str] | None = None,
    method: str = "GET",
    path: str = "/",
    request_headers: Mapping[str, str] | None = None,
    route: str = "default",
    request_id: str = "req_recorded",
    max_decompressed: int = 8 << 20,
) -> Exchange:
    """An exchange from a recorded response, read exactly as the proxy reads a live one."""
    response_headers = CIMultiDictProxy(CIMultiDict(headers or {}))
    content_type = response_headers.get("Content-Type", "")
    media_type, _, params = content_type.partition(";")
    charset = None
    for param in params.split(";"):
        key, _, value = param.strip().partition("=")
        if key.lower() == "charset":
            charset = value.strip('"')
    parsed = bodies.parse(
        body,
        encoding=response_headers.get("Content-Encoding", ""),
        charset=charset,
        limit=max_decompressed,
        cut=False,
    )
    return Exchange(
        method=method.upper(),
        path=path,
        route=route,
        request_id=request_id,
        request_headers=CIMultiDictProxy(CIMultiDict(request_headers or {})),
        status=status,
        headers=response_headers,
        content_type=media_type.strip().lower(),
        text=parsed.text,
        json=parsed.json,
        truncated=parsed.truncated,
    )


def describe(value: Any) -> str:
    return repr(value) if not isinstance(value, str) else value
