"""Match and build, without the network: shared by the proxy, ``mend test`` and ``mend explain``.

Keeping this one function the only way from an exchange to an envelope means that what the rule
tests and explanations show is exactly what agents get.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from multidict import CIMultiDict, CIMultiDictProxy

from proxy.policy import upstream_body as bodies
from proxy.policy.envelope.build import BuildOptions, build
from proxy.policy.envelope.model import Envelope
from proxy.policy.envelope.scrubber import Scrubber
from proxy.policy.exchange import Exchange
from proxy.policy.protocols import arguments
from proxy.policy.protocols.base import Call, Protocol, Rendered, Unit
from proxy.policy.protocols.detect import Detector
from proxy.policy.redaction import Redactor, Scrubbed, echo
from proxy.policy.rules.rule import Match
from proxy.policy.rules.ruleset import RuleSet


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
    scrub = scrubber(redactor, exchange, kinds)
    envelope = build(match.rule.envelope, exchange, match.found, scrub, options)
    return Evaluation(envelope, match, kinds)


def scrubber(redactor: Redactor, exchange: Exchange, kinds: list[str]) -> Callable[[str], str]:
    """``redactor.scrub`` for the text of one exchange's envelope, its kinds added to ``kinds``;
    the values the model sent in a tool call's arguments stay readable (``redaction/echo.py``)."""
    run: Callable[[str], Scrubbed] = redactor.scrub
    if exchange.arguments:
        run = echo.keeping(run, echo.kept_values(redactor, arguments.echoed(exchange.arguments)))
        return Scrubber(run, kinds, None).scrub
    return Scrubber(run, kinds, redactor if redactor.remembers else None).scrub


def evaluate(
    ruleset: RuleSet, exchange: Exchange, redactor: Redactor, options: BuildOptions
) -> Evaluation | None:
    match = ruleset.match(exchange)
    return None if match is None else rewrite(match, exchange, redactor, options)


#: Errors of one response matched and built one by one; the rest share the last envelope.
MAX_UNITS = 100


@dataclass(slots=True)
class Answer:
    """A protocol's answer to a response: the rendered body and one evaluation per error unit
    (one in all for an error that is not in the protocol's shape)."""

    #: ``None``: the protocol has nothing to say it in; the envelope goes as plain HTTP
    rendered: Rendered | None
    evaluations: list[Evaluation]
    #: the protocol that answered; ``None``: plain HTTP
    protocol: Protocol | None = None
    #: the error unit each evaluation is for (empty: the response was matched whole)
    units: list[Unit] = field(default_factory=list)
    #: every error unit with its envelope, as rendered (past ``MAX_UNITS`` units share one)
    outcomes: list[tuple[Unit, Envelope]] = field(default_factory=list)


def answer(
    protocol: Protocol,
    call: Call,
    exchange: Exchange,
    ruleset: RuleSet,
    redactor: Redactor,
    options: BuildOptions,
) -> Answer | None:
    """What the agent gets when it speaks ``protocol``; ``None``: the response passes unchanged.

    A response in the protocol's shape is split into its errors (``Protocol.units``), each matched
    and built on its own and put back in place; a success without errors passes. Any other error
    response is matched whole, as plain HTTP is, and answered in the protocol's shape.
    """
    exchange.protocol = protocol.name.value
    units = protocol.units(call, exchange)
    if units:
        outcomes: list[tuple[Unit, Envelope]] = []
        evaluations: list[Evaluation] = []
        matched: list[Unit] = []
        for unit in units:
            if len(evaluations) == MAX_UNITS:
                # a batch of thousands of errors must not cost thousands of matches: the rest
                # carry the last envelope built (their own ids, paths and locations kept)
                outcomes.append((unit, evaluations[-1].envelope))
                continue
            found = unit_match(ruleset, unit)
            if found is None:
                continue
            read, unit_rule = found
            evaluation = rewrite(unit_rule, read, redactor, options)
            kept = protocol.scrubbed(unit, scrubber(redactor, read, evaluation.redactions))
            evaluation.envelope = protocol.adjust(kept, evaluation.envelope)
            outcomes.append((kept, evaluation.envelope))
            evaluations.append(evaluation)
            matched.append(kept)
        if evaluations:
            in_place = protocol.render(call, exchange, outcomes)
            return Answer(in_place, evaluations, protocol, matched, outcomes)
    if (exchange.status or 0) < 400:
        return None  # a success, or a protocol answer with no error in it
    described(protocol, call, exchange)
    match = ruleset.match(exchange)
    if match is None:
        return None
    evaluation = rewrite(match, exchange, redactor, options)
    rendered = protocol.render_whole(call, evaluation.envelope, exchange.status or 502)
    return Answer(rendered, [evaluation], protocol)


def unit_match(ruleset: RuleSet, unit: Unit) -> tuple[Exchange, Match] | None:
    """The rule one error unit matches, and the exchange it was read as.

    An API answer the unit reports (``Unit.reported``: a tool wrapping a REST call) is read as if
    that API had answered mend: first when a rule knows it, or when the words quote it (its
    body, a header: its status's fallback reads them); else the words, when a rule knows them;
    else the answer's status; else the words' fallback, which keeps them."""
    reported = unit.reported
    behind = ruleset.match_unit(reported) if reported is not None else None
    if reported is not None and behind is not None and (unit.quotes or not behind.rule.is_fallback):
        return reported, behind
    own = ruleset.match_unit(unit.exchange)
    if own is not None and (behind is None or not own.rule.is_fallback):
        return unit.exchange, own
    return (reported, behind) if reported is not None and behind is not None else None


def answer_exchange(
    ruleset: RuleSet,
    exchange: Exchange,
    call: Call | None,
    detector: Detector,
    redactor: Redactor,
    options: BuildOptions,
) -> Answer | None:
    """The proxy's whole decision on a response it read: in the call's protocol when the request
    or the response names one (``answer``), else as plain HTTP (``rendered`` is ``None``)."""
    protocol = (
        detector.for_response(call, exchange.content_type, exchange.json)
        if call is not None
        else None
    )
    if call is not None and protocol is not None:
        return answer(protocol, call, exchange, ruleset, redactor, options)
    evaluation = evaluate(ruleset, exchange, redactor, options)
    return None if evaluation is None else Answer(None, [evaluation])


def described(protocol: Protocol, call: Call, exchange: Exchange) -> None:
    """Tell the rules what a whole-response error answers: the protocol, the method, the tool."""
    exchange.protocol = protocol.name.value
    for name, value in protocol.describe(call).items():
        setattr(exchange, name, value)


#: Bytes a recorded body may decompress to (the default ``decompressed_max_bytes``).
RECORDED_MAX_DECOMPRESSED = 8 << 20


def recorded_exchange(
    *,
    status: int,
    body: bytes,
    headers: Mapping[str, str] | None = None,
    method: str = "GET",
    path: str = "/",
    request_headers: Mapping[str, str] | None = None,
) -> Exchange:
    """An exchange from a recorded response, read exactly as the proxy reads a live one, on the
    ``default`` route with the request id ``req_recorded`` (a caller may set others on it)."""
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
        limit=RECORDED_MAX_DECOMPRESSED,
        cut=False,
    )
    return Exchange(
        method=method.upper(),
        path=path,
        route="default",
        request_id="req_recorded",
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
