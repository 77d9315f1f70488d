"""Which rule a recorded response matches, and why every earlier rule did not: what ``mend
explain`` prints and the admin page's playground shows.

The verdicts come from ``RuleSet.explain`` and the envelope from ``proxy.policy.evaluate`` -- the
path the proxy takes -- so what this prints is what an agent would receive. Given a protocol (and
the request's body, for its ids and query), each error of a JSON-RPC, MCP or GraphQL response is
explained on its own, and the answer the agent gets in its protocol is printed last.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from proxy.config.choices import ProtocolName
from proxy.config.route import Route, below
from proxy.config.settings import Settings
from proxy.policy import json_depth
from proxy.policy.envelope.build import BuildOptions
from proxy.policy.evaluate import Answer, Evaluation, answer_exchange, recorded_exchange
from proxy.policy.exchange import NOT_JSON, Exchange
from proxy.policy.protocols.detect import Detector, default_protocols
from proxy.policy.rules.rule import Verdict
from proxy.policy.rules.ruleengine import Engine
from proxy.policy.rules.ruleset import RuleSet
from proxy.policy.rules.words import counted
from proxy.policy.shorten import shortened

#: Content-Type assumed for a ``--body-file`` with this extension when no header names one.
MEDIA_BY_EXTENSION = {
    ".json": "application/json",
    ".html": "text/html; charset=utf-8",
    ".htm": "text/html; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".xml": "application/xml",
}


def parse_header(text: str) -> tuple[str, str]:
    """``"Name: value"`` -> ``("Name", "value")``; ``ValueError`` when there is no name."""
    name, sep, value = text.partition(":")
    if not sep or not name.strip() or any(c.isspace() for c in name.strip()):
        raise ValueError(f"{text!r} is not a header: write 'Name: value'")
    return name.strip(), value.strip()


def route_for(settings: Settings, name: str | None, path: str) -> Route:
    """The route named ``name``, else the one whose prefix is the longest match for ``path``."""
    if name is not None:
        for route in settings.routes:
            if route.name == name:
                return route
        known = ", ".join(r.name for r in settings.routes)
        raise ValueError(f"no route named {name!r} (routes: {known})")
    for route in sorted(settings.routes, key=lambda r: len(r.prefix), reverse=True):
        if path == route.prefix or path.startswith(below(route.prefix)):
            return route
    raise ValueError(f"no route's prefix matches {path!r}")


def build_options(settings: Settings) -> BuildOptions:
    return BuildOptions(
        retry_after_default_ms=settings.retry_after_default_ms,
        retry_after_max_ms=settings.retry_after_max_ms,
        docs_base_url=(settings.public_url or "").rstrip("/"),
    )


@dataclass(frozen=True, slots=True)
class Explanation:
    route: str
    exchange: Exchange
    verdicts: tuple[Verdict, ...]
    evaluation: Evaluation | None
    #: the protocol the answer is in (``http``: the envelope as is)
    protocol: str = ProtocolName.HTTP.value
    #: a protocol response's errors, each explained on its own (empty: matched whole)
    units: tuple[Explanation, ...] = ()
    #: the JSON document the agent receives in its protocol, when it is one
    answer: Any = None

    def applies(self, verdict: Verdict) -> bool:
        """Whether the rule could match this status at all (others are skipped unless --all)."""
        return self.exchange.status in verdict.rule.statuses

    @property
    def skipped(self) -> int:
        return sum(not self.applies(v) for v in self.verdicts)

    @property
    def matched(self) -> Verdict | None:
        return next((v for v in self.verdicts if v.matched), None)


@dataclass(frozen=True, slots=True)
class RequestBody:
    """What ``mend explain`` knows of the request beyond method and path, for a protocol."""

    protocol: ProtocolName = ProtocolName.HTTP
    body: bytes | None = None
    query_string: str = ""


def explain(
    engine: Engine,
    route: str,
    exchange: Exchange,
    options: BuildOptions | None = None,
    request: RequestBody | None = None,
) -> Explanation:
    ruleset: RuleSet = engine.routes[route]
    exchange.route = route
    request = request or RequestBody()
    detector = Detector(default_protocols())
    call = detector.offline(
        request.protocol,
        method=exchange.method,
        query_string=request.query_string,
        headers=exchange.request_headers,
        body=request.body,
    )
    answered = answer_exchange(
        ruleset,
        exchange,
        call,
        detector,
        engine.redactor_for(route),  # the route's redaction additions, as the proxy has them
        options or BuildOptions(),
    )
    protocol = answered.protocol.name.value if answered and answered.protocol else "http"
    document = answered_document(answered)
    if answered is not None and answered.units:
        units = tuple(
            Explanation(route, unit.exchange, tuple(ruleset.explain_unit(unit.exchange)), one)
            for unit, one in zip(answered.units, answered.evaluations, strict=True)
        )
        first = units[0]
        return Explanation(
            route, exchange, first.verdicts, first.evaluation, protocol, units, document
        )
    verdicts = tuple(ruleset.explain(exchange))
    evaluation = answered.evaluations[0] if answered is not None else None
    return Explanation(route, exchange, verdicts, evaluation, protocol, (), document)


def exchange_from(
    *,
    status: int,
    body: bytes,
    headers: Sequence[str] = (),
    method: str = "GET",
    path: str = "/",
    request_headers: Sequence[str] = (),
    body_file: Path | None = None,
) -> Exchange:
    """An exchange from ``mend explain``'s flags (``headers`` are ``"Name: value"`` strings)."""
    response_headers = dict(parse_header(h) for h in headers)
    media = MEDIA_BY_EXTENSION.get(body_file.suffix.lower()) if body_file else None
    if media and not any(k.lower() == "content-type" for k in response_headers):
        response_headers["Content-Type"] = media
    return recorded_exchange(
        status=status,
        body=body,
        headers=response_headers,
        method=method,
        path=path,
        request_headers=dict(parse_header(h) for h in request_headers),
    )


def _json_value(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value, default=str))


def as_json(explanation: Explanation, *, show_all: bool = False) -> dict[str, Any]:
    ex = explanation.exchange
    matched = explanation.matched
    evaluation = explanation.evaluation
    return {
        "route": explanation.route,
        "request": {"method": ex.method, "path": ex.path},
        "response": {"status": ex.status, "content_type": ex.content_type, "json": ex.is_json},
        "outcome": "passthrough" if evaluation is None else "envelope",
        "verdicts": [
            {
                "rule": v.rule.id,
                "source": v.rule.source,
                "matched": v.matched,
                "applies": explanation.applies(v),
                "reason": v.reason,
            }
            for v in explanation.verdicts
            if show_all or explanation.applies(v)
        ],
        "skipped": 0 if show_all else explanation.skipped,
        "matched": None
        if matched is None
        else {
            "rule": matched.rule.id,
            "source": matched.rule.source,
            "fallback": matched.rule.is_fallback,
            "found": _json_value(matched.found),
        },
        "envelope": None if evaluation is None else {"error": evaluation.envelope.as_dict()},
        "protocol": explanation.protocol,
        "units": [as_json(unit, show_all=show_all) for unit in explanation.units],
        "answer": explanation.answer,
    }


def _show(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()


def as_text(explanation: Explanation, *, show_all: bool = False) -> str:
    if not explanation.units:
        return _with_answer(_as_text(explanation, show_all=show_all), explanation)
    ex = explanation.exchange
    count = len(explanation.units)
    parts = [
        f"response {ex.status} to {ex.method} {ex.path} on route {explanation.route}: "
        f"{explanation.protocol}, {count} error{'s' if count != 1 else ''}, each matched alone"
    ]
    for n, unit in enumerate(explanation.units, 1):
        parts += ["", f"--- error {n} of {count} ---", _as_text(unit, show_all=show_all)]
    return _with_answer("\n".join(parts), explanation)


def _with_answer(text: str, explanation: Explanation) -> str:
    if explanation.answer is None:
        return text
    pretty = orjson.dumps(explanation.answer, option=orjson.OPT_INDENT_2).decode()
    return f"{text}\n\nanswer in {explanation.protocol}:\n{pretty}"


def _as_text(explanation: Explanation, *, show_all: bool = False) -> str:
    ex = explanation.exchange
    kind = ex.content_type or "no Content-Type"
    lines = [
        f"response {ex.status} ({kind}{', JSON body' if ex.is_json else ''}) "
        f"to {ex.method} {ex.path} on route {explanation.route}",
        "",
    ]
    shown = [v for v in explanation.verdicts if show_all or explanation.applies(v)]
    id_width = max((len(v.rule.id) for v in shown), default=0)
    src_width = max((len(v.rule.source) for v in shown), default=0)
    for v in shown:
        mark = "MATCH" if v.matched else "no" if explanation.applies(v) else "skip"
        reason = shortened(v.reason, 160)
        lines.append(
            f"  {mark:<5}  {v.rule.id:<{id_width}}  {v.rule.source:<{src_width}}  {reason}"
        )
    if not show_all and explanation.skipped:
        lines.append(
            f"  ({counted(explanation.skipped, 'rule')} skipped: they do not match status "
            f"{ex.status}; "
            "--all lists them)"
        )
    lines.append("")
    matched, evaluation = explanation.matched, explanation.evaluation
    if matched is None or evaluation is None:
        lines.append("no rule matched: the response passes through unchanged")
        return "\n".join(lines)
    note = " (a built-in fallback: no specific rule knows this response)"
    lines.append(
        f"matched: {matched.rule.id} at {matched.rule.source}"
        f"{note if matched.rule.is_fallback else ''}"
    )
    lines.append("variables found:" if matched.found else "variables found: none")
    lines.extend(f"  {name} = {_show(value)}" for name, value in sorted(matched.found.items()))
    lines.append("envelope:")
    body = {"error": evaluation.envelope.as_dict()}
    lines.append(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode())
    return "\n".join(lines)


def answered_document(answered: Answer | None) -> Any:
    """The JSON the agent receives for a protocol answer (``None``: passed through, or plain)."""
    if answered is None or answered.rendered is None or not answered.rendered.body:
        return None
    document = json_depth.loads(answered.rendered.body)
    return None if document is NOT_JSON else document
