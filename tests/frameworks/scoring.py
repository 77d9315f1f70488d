"""Labels, the envelope an agent got, and how the two are scored.

Metrics, per case:
  category, retryable  equal to the label
  retry_after          within 2 s of the stated reset; positive when the label says "any";
                       null when the case is not retryable
  pointers             the set of JSON Pointers in ``field`` and ``invalid_fields`` equals the
                       label's set (scored only on cases whose framework names a field)
  invented             pointers mend gave that the label does not have (every case)
  leaks                stack traces, file paths, the planted secret, in the body or headers
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

CASES_FILE = Path(__file__).resolve().parent / "cases.yaml"
RETRY_TOLERANCE_S = 2.0
METRICS = ("category", "retryable", "retry_after", "pointers", "invented", "leaks")
#: what must never reach an agent: the planted secret and its host, traces, paths, module files
LEAK_MARKERS = (
    "Pl4ntedSecret",
    "db.internal",
    "Traceback",
    'File "',
    "site-packages",
    "node_modules",
    "/work/",
    "/tests/frameworks",
    "_app.py",
    "_app.js",
    "    at ",
)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Request(_Model):
    method: str
    path: str
    json_body: Any = Field(None, alias="json")
    #: a body of this many bytes (octet-stream), or a JSON object padded to it
    bytes: int | None = None
    json_bytes: int | None = None
    #: a body sent as is with Content-Type application/json (malformed JSON)
    raw_json: str | None = None


class Expect(_Model):
    category: str
    retryable: bool
    retry_after_s: float | Literal["any"] | None = None
    pointers: frozenset[str]


class Case(_Model):
    id: str
    app: str
    request: Request
    expect: Expect
    send: int = Field(1, ge=1, le=5)
    engine: str | None = None
    #: why only a built-in fallback answers this case (mend check --coverage), when deliberate
    fallback: str | None = None


def load_cases(path: Path = CASES_FILE) -> list[Case]:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    return [Case.model_validate(case) for case in document["cases"]]


def envelopes(document: Any) -> list[dict[str, Any]]:
    """The envelope(s) in an answer: ``error`` (HTTP), or GraphQL's ``errors[].extensions.mend``."""
    if not isinstance(document, dict):
        return []
    error = document.get("error")
    if isinstance(error, dict) and "code" in error:
        return [error]
    found = []
    for entry in document.get("errors") or []:
        mend = entry.get("extensions", {}).get("mend") if isinstance(entry, dict) else None
        if isinstance(mend, dict):
            found.append(mend)
    return found


def pointers(envelope: dict[str, Any]) -> set[str]:
    got = {f["field"] for f in envelope.get("invalid_fields") or [] if f.get("field")}
    if envelope.get("field"):
        got.add(envelope["field"])
    return got


@dataclass(frozen=True)
class Outcome:
    """One case scored: each metric passed or not, and what mend said, for the report."""

    case: Case
    status: int
    envelope: dict[str, Any] | None
    passed: dict[str, bool]
    got_pointers: frozenset[str]
    leaked: tuple[str, ...]

    def problems(self) -> list[str]:
        e = self.envelope or {}
        x = self.case.expect
        said = {
            "category": f"category {e.get('category')!r}, label {x.category!r}",
            "retryable": f"retryable {e.get('retryable')}, label {x.retryable}",
            "retry_after": f"retry_after_ms {e.get('retry_after_ms')}, label {x.retry_after_s} s",
            "pointers": f"pointers {sorted(self.got_pointers)}, label {sorted(x.pointers)}",
            "invented": f"invented {sorted(self.got_pointers - x.pointers)}",
            "leaks": f"leaked {list(self.leaked)}",
        }
        return [said[m] for m in METRICS if not self.passed.get(m, True)]


def _retry_after_ok(expect: Expect, retry_after_ms: Any) -> bool:
    if not expect.retryable:
        return retry_after_ms is None
    if not isinstance(retry_after_ms, int) or retry_after_ms <= 0:
        return False
    if expect.retry_after_s == "any" or expect.retry_after_s is None:
        return True
    return abs(retry_after_ms / 1000 - expect.retry_after_s) <= RETRY_TOLERANCE_S


def score(case: Case, status: int, headers: Iterable[tuple[str, str]], body: bytes) -> Outcome:
    text = body.decode("utf-8", "replace") + "\n" + "\n".join(f"{k}: {v}" for k, v in headers)
    leaked = tuple(m for m in LEAK_MARKERS if m in text)
    try:
        found = envelopes(json.loads(body))
    except ValueError:
        found = []
    envelope = found[0] if found else None
    got: set[str] = set()
    for one in found:
        got |= pointers(one)
    x = case.expect
    passed = {"leaks": not leaked, "invented": not (got - x.pointers)}
    if envelope is not None:
        passed["category"] = envelope.get("category") == x.category
        passed["retryable"] = envelope.get("retryable") is x.retryable
        passed["retry_after"] = _retry_after_ok(x, envelope.get("retry_after_ms"))
    else:
        passed.update(category=False, retryable=False, retry_after=False)
    if x.pointers:
        passed["pointers"] = got == x.pointers
    return Outcome(case, status, envelope, passed, frozenset(got), leaked)


def failing(outcomes: Iterable[Outcome], metric: str) -> list[Outcome]:
    return [o for o in outcomes if metric in o.passed and not o.passed[metric]]


def rate(outcomes: list[Outcome], metric: str) -> tuple[int, int]:
    """(passed, scored) for one metric."""
    scored = [o for o in outcomes if metric in o.passed]
    return sum(o.passed[metric] for o in scored), len(scored)


def table(outcomes: list[Outcome]) -> str:
    """Per app and in total: each metric as passed/scored (invented, leaks: cases with any)."""
    rows: dict[str, list[Outcome]] = {}
    for o in outcomes:
        rows.setdefault(o.case.app.split("-")[0], []).append(o)
    rows["total"] = outcomes
    head = f"{'app':<12}{'cases':>6}" + "".join(f"{m:>13}" for m in METRICS)
    lines = [head, "-" * len(head)]
    for app, group in rows.items():
        cells = []
        for metric in METRICS:
            ok, n = rate(group, metric)
            if metric in ("invented", "leaks"):
                cells.append(f"{n - ok:>13}")
            else:
                cells.append(f"{ok:>6}/{n:<3}{(100 * ok // n if n else 100):>3}%")
        lines.append(f"{app:<12}{len(group):>6}" + "".join(cells))
    return "\n".join(lines)
