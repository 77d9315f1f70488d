"""Every envelope's sentences agree with its own ``retryable`` and ``action``, over every case of
every shipped pack (rules/tests/*.yaml) and every built-in fallback: an agent reads the message,
the hint and the steps together, and one that contradicts another is followed at random."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.edge.catalog import example_envelope
from proxy.policy.envelope.model import Envelope
from proxy.policy.regex import linear
from proxy.tools.ruletest.cases import Case
from proxy.tools.ruletest.engines import Engines

ROOT = Path(__file__).resolve().parents[3]
CASES = sorted((ROOT / "rules" / "tests").glob("*.yaml"))
ENGINES = Engines()

#: A sentence telling the agent to send the same request again (or to retry).
_SEND_AGAIN = linear(r"(?i)\b(?:retry|again unchanged|same (?:request|call) again)\b")
#: "Do not send it again more than once": it may be sent once more.
_ONCE_MORE = linear(r"(?i)\bmore than once\b")
#: A sentence telling it not to (or only after changing something).
_NEGATED = linear(r"(?i)\b(?:do not|don't|never|not|cannot|instead of|before)\b")
#: A sentence telling the agent not to send it again at all.
_DO_NOT_SEND = linear(r"(?i)\b(?:do not|don't|never) (?:retry|send|call)\b")
_EMPTY_PARENS = linear(r"\(\s*\)")
_UNFILLED = linear(r"\{\{|\}\}")
#: An operation a sentence names: an HTTP request line, a tool call, a JSON-RPC call.
_OPERATION = linear(
    r"\b(?:GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS) /[^\s']*|the [\w.-]+ tool call|"
    r"the JSON-RPC call [\w./-]+"
)


def _names(text: str) -> list[str]:
    """Every operation ``text`` names, left to right."""
    found: list[str] = []
    while (match := _OPERATION.search(text)) is not None and len(found) < 20:
        found.append((match.group(0) or "").rstrip(".,;:"))
        text = text[match.end() :]
    return found


def _sentences(envelope: Envelope) -> list[str]:
    texts = [envelope.message, envelope.hint, *envelope.steps]
    return [part.strip() for text in texts for part in text.replace(";", ".").split(". ") if part]


def _problems(envelope: Envelope) -> list[str]:
    """What in ``envelope``'s words contradicts its fields."""
    problems = []
    for sentence in _sentences(envelope):
        if _EMPTY_PARENS.search(sentence) or _UNFILLED.search(sentence):
            problems.append(f"unfilled: {sentence!r}")
        resends = _SEND_AGAIN.search(sentence) and not _NEGATED.search(sentence)
        if not envelope.retryable and resends:
            problems.append(f"retryable false, but says to resend: {sentence!r}")
        if not envelope.retryable and _ONCE_MORE.search(sentence):
            problems.append(f"retryable false, but allows one more try: {sentence!r}")
        if envelope.retryable and _DO_NOT_SEND.search(sentence) and "yet" not in sentence:
            problems.append(f"retryable true, but says not to resend: {sentence!r}")
    named = {
        name for text in (envelope.message, envelope.hint, *envelope.steps) for name in _names(text)
    } - {envelope.next_operation}
    if len(named) > 1:
        problems.append(f"the hint and steps name different operations: {sorted(named)}")
    return problems


def _envelopes() -> list[Any]:
    out = []
    for file in CASES:
        for case in yaml.safe_load(file.read_text(encoding="utf-8"))["cases"]:
            out.append(pytest.param(file, case, id=f"{file.stem}: {case['name']}"))
    return out


@pytest.mark.parametrize(("file", "case"), _envelopes())
def test_a_case_envelope_says_what_its_fields_say(file: Path, case: dict[str, Any]) -> None:
    """Every envelope of a pack case (each error unit of a protocol answer too)."""
    loaded = Case.model_validate(case)
    if loaded.response is None:
        return  # a redaction case: no envelope
    answered = ENGINES.answer(loaded, file.parent)
    problems = [
        problem
        for evaluation in (answered.evaluations if answered is not None else [])
        for problem in _problems(evaluation.envelope)
    ]
    assert not problems, problems


@pytest.mark.parametrize("rule", [pytest.param(r, id=r.id) for r in ENGINES.get().rules])
def test_a_rule_example_says_what_its_fields_say(rule: Any) -> None:
    """Every rule's envelope made from the rule alone (the error catalog's example)."""
    envelope = example_envelope(rule)
    if envelope is not None:
        assert not _problems(envelope), _problems(envelope)


def test_the_check_catches_a_contradiction() -> None:
    """The check itself: a retryable:false plan saying "send it again more than once" is
    caught, and so are its empty parentheses and an operation other than the message's."""
    envelope = example_envelope(ENGINES.get().rules[-1])
    assert envelope is not None
    bad = envelope.model_copy(
        update={"retryable": False, "hint": "Send GET /x again unchanged more than once ()."}
    )
    kinds = {problem.split(":")[0] for problem in _problems(bad)}
    assert kinds == {
        "unfilled",
        "retryable false, but says to resend",
        "retryable false, but allows one more try",
        "the hint and steps name different operations",
    }
