"""A case run through the proxy's own path, and the report of a run (``mend test``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxy.config.yamlfile import RuleError
from proxy.policy.explanation import answered_document
from proxy.tools.ruletest.cases import LoadedCase, RedactionExpectation
from proxy.tools.ruletest.compare import differences
from proxy.tools.ruletest.engines import Engines, exchange_for, run_protocol
from proxy.tools.ruletest.loading import load_cases

_NO_RULES = "the rule files this case needs do not load (problems above)"


@dataclass(frozen=True, slots=True)
class Outcome:
    loaded: LoadedCase
    problems: tuple[str, ...]  # empty when the case passed
    rule_problems: tuple[str, ...] = ()  # why the rules it needs do not load

    @property
    def passed(self) -> bool:
        return not self.problems


def run_case(loaded: LoadedCase, engines: Engines) -> Outcome:
    case = loaded.case
    try:
        engine = engines.get(
            [loaded.file.parent / r for r in case.rules], case.route.success_rules, case.redaction
        )
    except RuleError as exc:
        return Outcome(loaded, (_NO_RULES,), exc.problems)
    redactor = engine.redactor_for("default")
    if case.redact is not None:
        assert case.expect_redaction is not None  # the model requires it
        agent, log = redactor.scrub(case.redact).text, redactor.mask(case.redact).text
        return Outcome(loaded, tuple(redaction_problems(case.expect_redaction, [agent], log)))
    assert case.response is not None
    exchange = exchange_for(case.request, case.response)
    answered = run_protocol(
        engine.routes["default"], exchange, case.protocol, case.request, redactor
    )
    if case.expect == "passthrough":
        if answered is None:
            return Outcome(loaded, ())
        env = answered.evaluations[0].envelope
        return Outcome(
            loaded, (f"expected passthrough, got an envelope: rule {env.rule}, code {env.code}",)
        )
    if answered is None:
        return Outcome(loaded, ("expected an envelope, got passthrough (no rule matched)",))
    envelopes = [evaluation.envelope.as_dict() for evaluation in answered.evaluations]
    problems = [str(d) for d in differences(case.expect, envelopes[0])]
    if case.expect_units is not None:
        problems += [str(d) for d in differences(case.expect_units, envelopes, "units")]
    document = answered_document(answered)
    if case.expect_response is not None:
        problems += [str(d) for d in differences(case.expect_response, document, "response")]
    if case.expect_redaction is not None:
        read = list(_strings([envelopes, document]))
        logged = redactor.mask(exchange.text[:16384]).text
        problems += redaction_problems(case.expect_redaction, read, logged)
    return Outcome(loaded, tuple(problems))


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value, keys included (what an agent may read)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def redaction_problems(expect: RedactionExpectation, agent: Sequence[str], log: str) -> list[str]:
    """What breaks ``expect``: ``agent`` are the strings an agent reads, ``log`` the log's."""
    problems = []
    for text in expect.masked:
        if any(text in seen for seen in agent):
            problems.append(f"masked: {text!r} reaches the agent")
    for text in expect.kept:
        if not any(text in seen for seen in agent):
            shown = " | ".join(agent)[:300]
            problems.append(f"kept: {text!r} is not in what the agent reads: {shown!r}")
    for text in expect.log_masked:
        if text in log:
            problems.append(f"log_masked: {text!r} is in the log line")
    for text in expect.log_kept:
        if text not in log:
            problems.append(f"log_kept: {text!r} is not in the log line: {log[:300]!r}")
    return problems


@dataclass(frozen=True, slots=True)
class Report:
    outcomes: tuple[Outcome, ...]
    problems: tuple[str, ...]  # files that did not load

    @property
    def failed(self) -> int:
        return sum(not o.passed for o in self.outcomes)

    @property
    def passed(self) -> int:
        return len(self.outcomes) - self.failed

    @property
    def ok(self) -> bool:
        return not self.failed and not self.problems

    def lines(self) -> list[str]:
        """Problems, then each failing case with its differences, then the summary line."""
        out = list(self.problems)
        out.extend(dict.fromkeys(p for o in self.outcomes for p in o.rule_problems))
        for outcome in self.outcomes:
            if not outcome.passed:
                out.append(f"{outcome.loaded.where}: {outcome.loaded.case.name}")
                out.extend(f"    {p}" for p in outcome.problems)
        out.append(f"{self.passed} passed, {self.failed} failed")
        return out


def run_tests(
    paths: Sequence[Path], extra_rules: Sequence[Path] = (), *, default_packs: bool = True
) -> Report:
    cases, problems = load_cases(paths)
    engines = Engines(tuple(extra_rules), default_packs)
    return Report(tuple(run_case(c, engines) for c in cases), tuple(problems))
