"""``mend test``: rule test cases (like ``promtool test rules``), and recorded-response coverage.

A case file is YAML::

    cases:
      - name: fastapi 422 lists every field
        request: {method: POST, path: /api/orders, headers: {...}}   # optional
        route: {success_rules: ["slack.*"]}                          # optional
        rules: [../extra.yaml]     # optional; relative to this file, loaded before the packs
        response:
          status: 422
          headers: {Content-Type: application/json}
          json: {detail: [...]}    # or body: "raw text" (at most one; neither: no body)
        expect:                    # a subset of the envelope's ``error`` object
          rule: fastapi.validation
          code: VALIDATION_FAILED
          invalid_fields: [{field: /qty, received: -1}, {field: /sku}]
        # or:  expect: passthrough (no rule may match: a 2xx the proxy leaves untouched)

A case may state the ``protocol`` the agent speaks (``http`` when it does not; ``auto`` detects
it as the proxy does) and the request's body (``request: {json: ...}`` or ``body:``): then the
response is answered in that protocol (``proxy/policy/protocols``), ``expect`` is the first error's
envelope (``expect_units`` lists one subset per error, in order) and ``expect_response`` a subset
of the JSON the agent receives::

      - name: a variable of the wrong type points at /variables/qty
        protocol: graphql
        request: {method: POST, path: /graphql, json: {query: "...", variables: {qty: x}}}
        response: {status: 200, json: {data: null, errors: [...]}}
        expect: {invalid_fields: [{field: /variables/qty}]}
        expect_response: {data: null, errors: [{extensions: {code: VALIDATION_FAILED}}]}

``expect`` is compared as a subset: every key it names must be in the envelope with an equal
value; a nested mapping is again a subset; a list must have as many elements as the envelope's and
each element is compared as a subset of the element at the same position. Scalars compare exactly
(``1`` is not ``true``, ``1`` equals ``1.0``).

Each case runs through ``proxy.policy.evaluate`` -- the very path the proxy takes -- against an
engine
built from the case's rules, the ``--rules`` files, the shipped packs and the built-in fallbacks.

Redaction: ``expect`` may also list strings the agent must not see (``masked``) or must still see
(``kept``) anywhere in the envelope (and the protocol's answer), and strings the operator's log
line must not or must hold (``log_masked``, ``log_kept``: the upstream body, masked). A case may
add ``redaction:`` (the config's keys: secrets, internal_domains, allow, ...), and instead of a
``response`` give ``redact: "some text"``, checked as one string of an envelope and as the log::

      - name: ACME tokens never reach an agent; order ids do
        redaction: {secrets: ["acme_live_[A-Za-z0-9]{16,}"], allow: ["ORD-[A-Za-z0-9]{28}"]}
        redact: "charge ORD-8f3kQ9zX2mW7vB4nR1tY6uP0aS5d failed: acme_live_0123456789abcdef"
        expect: {masked: [acme_live_0123456789abcdef], kept: [ORD-8f3kQ9zX2mW7vB4nR1tY6uP0aS5d]}

Recorded responses for ``mend check --coverage DIR``: see ``load_recorded``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from proxy.config.choices import ProtocolName
from proxy.config.redaction import RedactionSettings
from proxy.config.route import Route
from proxy.config.settings import PACKAGED_RULES, Settings
from proxy.config.yamlfile import Lines, RuleError, parse_yaml, validation_problems
from proxy.policy import json_depth
from proxy.policy.build import BuildOptions
from proxy.policy.envelope import Envelope
from proxy.policy.evaluate import (
    Answer,
    Evaluation,
    agent_redactor,
    answer_exchange,
    evaluate,
    recorded_exchange,
)
from proxy.policy.exchange import NOT_JSON, Exchange
from proxy.policy.protocols.detect import Detector, default_protocols
from proxy.policy.redaction import Redactor
from proxy.policy.ruleengine import Engine
from proxy.policy.ruleset import RuleSet

#: Where ``mend test`` looks when given no paths.
DEFAULT_TESTS = PACKAGED_RULES / "tests"
#: The upstream of the throw-away route cases run on; nothing ever connects to it.
_NOWHERE = "http://127.0.0.1:9"
_ENVELOPE_KEYS = frozenset(Envelope.model_fields)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class RequestSpec(_Model):
    method: str = "GET"
    path: str = "/"
    #: the query string, without ``?`` (a GraphQL GET's ``query=``)
    query: str = ""
    headers: dict[str, str] = {}
    #: the request body, for a protocol to read (a JSON-RPC id, a GraphQL query): one of these
    json_: Any = Field(default=None, alias="json")
    body: str | None = None

    def raw_body(self) -> bytes | None:
        if "json_" in self.model_fields_set:
            return orjson.dumps(self.json_)
        return self.body.encode() if self.body is not None else None

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("a request path starts with '/'")
        return value


class RouteSpec(_Model):
    success_rules: tuple[str, ...] = ()


class ResponseSpec(_Model):
    status: int = Field(ge=100, le=599)
    headers: dict[str, str] = {}
    json_: Any = Field(default=None, alias="json")
    body: str | None = None

    @model_validator(mode="after")
    def _one_body(self) -> ResponseSpec:
        given = [n for n in ("json_", "body") if n in self.model_fields_set]
        if len(given) > 1:
            raise ValueError("give json: or body:, not both (neither: a response with no body)")
        return self

    def raw(self) -> tuple[bytes, dict[str, str]]:
        """The body bytes (none when neither ``json:`` nor ``body:`` is given) and headers; a
        ``json:`` body is sent as application/json by default."""
        headers = dict(self.headers)
        if "json_" in self.model_fields_set:
            if not any(k.lower() == "content-type" for k in headers):
                headers["Content-Type"] = "application/json"
            return orjson.dumps(self.json_), headers
        return (self.body or "").encode(), headers


Expectation = Literal["passthrough"] | dict[str, Any]
#: keys of ``expect`` about redaction rather than the envelope's fields
_REDACTION_KEYS = ("masked", "kept", "log_masked", "log_kept")


class RedactionExpectation(_Model):
    """Strings the agent must not / must see, and the operator's log must not / must hold."""

    masked: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    log_masked: tuple[str, ...] = ()
    log_kept: tuple[str, ...] = ()


def _redaction_part(data: Any) -> Any:
    """Move ``expect``'s redaction keys into ``expect_redaction`` (before validation)."""
    if not isinstance(data, dict) or not isinstance(data.get("expect"), dict):
        return data
    expect = dict(data["expect"])
    part = {key: expect.pop(key) for key in _REDACTION_KEYS if key in expect}
    if not part:
        return data
    return {**data, "expect": expect, "expect_redaction": part}


def _envelope_subset(value: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(value) - _ENVELOPE_KEYS)
    if unknown:
        raise ValueError(f"not envelope fields: {unknown}; expect one of the contract's")
    return value


class Case(_Model):
    name: str = Field(min_length=1)
    #: the protocol the agent speaks; ``http`` (the default) reads the response as plain HTTP
    protocol: ProtocolName = ProtocolName.HTTP
    request: RequestSpec = RequestSpec()
    route: RouteSpec = RouteSpec()
    rules: tuple[str, ...] = ()
    response: ResponseSpec | None = None
    #: instead of a response: a text to redact, as one string of an envelope and as the log
    redact: str | None = None
    #: redaction additions for this case (the config's ``redaction:`` keys)
    redaction: RedactionSettings = RedactionSettings()
    expect: Expectation
    #: ``expect``'s ``masked``/``kept``/``log_masked``/``log_kept``
    expect_redaction: RedactionExpectation | None = None
    #: one envelope subset per error unit, in order (a batch, a GraphQL errors list)
    expect_units: list[dict[str, Any]] | None = None
    #: a subset of the JSON document the agent receives (protocol answers)
    expect_response: Any = None

    @model_validator(mode="before")
    @classmethod
    def _split_expect(cls, data: Any) -> Any:
        return _redaction_part(data)

    @field_validator("expect")
    @classmethod
    def _expect(cls, value: Expectation) -> Expectation:
        return _envelope_subset(value) if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _what_is_tested(self) -> Case:
        if (self.response is None) == (self.redact is None):
            raise ValueError("give exactly one of response: or redact:")
        envelope = self.expect if isinstance(self.expect, dict) else None
        if self.redact is not None and (envelope or self.expect_redaction is None):
            raise ValueError("a redact: case expects masked/kept/log_masked/log_kept only")
        if envelope == {} and self.expect_redaction is None:
            raise ValueError("expect: names at least one envelope field, or is 'passthrough'")
        return self

    @field_validator("expect_units")
    @classmethod
    def _units(cls, value: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for item in value or ():
            _envelope_subset(item)
        return value


class CaseFile(_Model):
    cases: list[Case]


class Recorded(_Model):
    """One recorded response for ``--coverage``: a case without ``name``/``expect``."""

    name: str | None = None
    request: RequestSpec = RequestSpec()
    route: RouteSpec = RouteSpec()
    response: ResponseSpec
    deliberate: str | None = Field(default=None, min_length=1)


@dataclass(frozen=True, slots=True)
class LoadedCase:
    case: Case
    file: Path
    line: int

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


# --- loading ----------------------------------------------------------------------------------


def _yaml_files(paths: Iterable[Path]) -> Iterator[tuple[Path, bool]]:
    """(file, named explicitly) for each path; a directory means its YAML files, sorted."""
    for path in paths:
        if path.is_dir():
            for child in sorted(path.iterdir()):
                if child.is_file() and child.suffix in {".yaml", ".yml"}:
                    yield child, False
        elif path.exists():
            yield path, True
        else:
            raise RuleError([f"{path}:1: no such test file or directory"])


def _parse(file: Path) -> tuple[Any, Lines]:
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError([f"{file}:1: cannot read: {exc}"]) from exc
    return parse_yaml(text, str(file))


def load_cases(paths: Sequence[Path]) -> tuple[list[LoadedCase], list[str]]:
    """Every case of every file, and the ``file:line`` problems of the files that do not load.

    A YAML file found in a directory that has ``rules:`` but no ``cases:`` is a rule file the
    cases use, not a case file, and is skipped.
    """
    cases: list[LoadedCase] = []
    problems: list[str] = []
    try:
        files = list(_yaml_files(paths))
    except RuleError as exc:
        return [], list(exc.problems)
    for file, explicit in files:
        try:
            data, lines = _parse(file)
        except RuleError as exc:
            problems.extend(exc.problems)
            continue
        if isinstance(data, dict) and "cases" not in data and "rules" in data and not explicit:
            continue
        if not isinstance(data, dict):
            problems.append(f"{file}:1: a test file is a mapping with cases: [...]")
            continue
        try:
            parsed = CaseFile.model_validate(data)
        except ValidationError as exc:
            problems.extend(validation_problems(exc, str(file), lines))
            continue
        cases.extend(
            LoadedCase(case, file, lines.get(("cases", i), 1))
            for i, case in enumerate(parsed.cases)
        )
    return cases, problems


# --- engines ----------------------------------------------------------------------------------


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
    return recorded_exchange(
        status=response.status,
        body=body,
        headers=headers,
        method=request.method,
        path=request.path,
        request_headers=request.headers,
    )


def answered_document(answered: Answer | None) -> Any:
    """The JSON the agent receives for a protocol answer (``None``: passed through, or plain)."""
    if answered is None or answered.rendered is None or not answered.rendered.body:
        return None
    document = json_depth.loads(answered.rendered.body)
    return None if document is NOT_JSON else document


# --- comparing --------------------------------------------------------------------------------

_MISSING: Any = type("_Missing", (), {"__repr__": lambda _: "<missing>"})()


@dataclass(frozen=True, slots=True)
class Difference:
    path: str
    expected: Any
    got: Any

    def __str__(self) -> str:
        return f"{self.path}: expected {_show(self.expected)}, got {_show(self.got)}"


def _show(value: Any) -> str:
    if value is _MISSING:
        return "<missing>"
    return orjson.dumps(value, default=str).decode()


def _same_scalar(expected: Any, got: Any) -> bool:
    if isinstance(expected, bool) or isinstance(got, bool):
        return type(expected) is type(got) and expected == got
    if isinstance(expected, int | float) and isinstance(got, int | float):
        return bool(expected == got)
    return type(expected) is type(got) and bool(expected == got)


def differences(expected: Any, got: Any, path: str = "") -> list[Difference]:
    """Where ``got`` fails to contain ``expected`` (subset semantics, see the module docstring)."""
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return [Difference(path or "(envelope)", expected, got)]
        out: list[Difference] = []
        for key, value in expected.items():
            sub = f"{path}.{key}" if path else str(key)
            out.extend(differences(value, got.get(key, _MISSING), sub))
        return out
    if isinstance(expected, list):
        if not isinstance(got, list):
            return [Difference(path, expected, got)]
        if len(expected) != len(got):
            return [Difference(f"{path} (length {len(expected)} vs {len(got)})", expected, got)]
        return [
            d
            for i, (e, g) in enumerate(zip(expected, got, strict=True))
            for d in differences(e, g, f"{path}[{i}]")
        ]
    if got is _MISSING or not _same_scalar(expected, got):
        return [Difference(path, expected, got)]
    return []


# --- running ----------------------------------------------------------------------------------

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


# --- coverage of recorded responses ----------------------------------------------------------

_STATUS_PREFIX = re.compile(r"^([1-5]\d\d)(?:[-_.]|$)")
_MEDIA_TYPES = {
    ".json": "application/json",
    ".html": "text/html; charset=utf-8",
    ".htm": "text/html; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".xml": "application/xml",
}
_META = ".meta.yaml"


class Meta(_Model):
    """``FILE.meta.yaml`` next to a body file: what its name cannot say."""

    status: int | None = Field(default=None, ge=100, le=599)
    headers: dict[str, str] = {}
    request: RequestSpec = RequestSpec()
    route: RouteSpec = RouteSpec()
    #: why only a fallback should explain this response (coverage lists it apart, with the reason)
    deliberate: str | None = Field(default=None, min_length=1)


@dataclass(frozen=True, slots=True)
class RecordedResponse:
    name: str
    request: RequestSpec
    response: ResponseSpec
    success_rules: tuple[str, ...] = ()
    deliberate: str | None = None


def _from_body_file(file: Path) -> RecordedResponse:
    meta = Meta()
    sidecar = file.with_name(file.name + _META)
    if sidecar.exists():
        data, lines = _parse(sidecar)
        try:
            meta = Meta.model_validate(data or {})
        except ValidationError as exc:
            raise RuleError(validation_problems(exc, str(sidecar), lines)) from exc
    status = meta.status
    if status is None and (match := _STATUS_PREFIX.match(file.name)):
        status = int(match.group(1))
    if status is None:
        raise RuleError(
            [f"{file}:1: no status: name the file like 503-{file.name} or add {sidecar.name}"]
        )
    headers = dict(meta.headers)
    media = _MEDIA_TYPES.get(file.suffix.lower())
    if media and not any(k.lower() == "content-type" for k in headers):
        headers["Content-Type"] = media
    try:
        body = file.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise RuleError([f"{file}:1: cannot read: {exc}"]) from exc
    response = ResponseSpec(status=status, headers=headers, body=body)
    return RecordedResponse(
        file.name, meta.request, response, meta.route.success_rules, meta.deliberate
    )


def _from_yaml(file: Path) -> list[RecordedResponse]:
    data, lines = _parse(file)
    if isinstance(data, dict) and "cases" in data:
        try:
            parsed = CaseFile.model_validate(data)
        except ValidationError as exc:
            raise RuleError(validation_problems(exc, str(file), lines)) from exc
        return [
            RecordedResponse(
                f"{file.name}:{lines.get(('cases', i), 1)} {c.name}",
                c.request,
                c.response,
                c.route.success_rules,
            )
            for i, c in enumerate(parsed.cases)
            if c.response is not None  # a redact: case has no response to cover
        ]
    try:
        one = Recorded.model_validate(data)
    except ValidationError as exc:
        raise RuleError(validation_problems(exc, str(file), lines)) from exc
    return [
        RecordedResponse(
            one.name or file.name,
            one.request,
            one.response,
            one.route.success_rules,
            one.deliberate,
        )
    ]


def load_recorded(directory: Path) -> tuple[list[RecordedResponse], list[str]]:
    """The recorded responses in ``directory`` (sorted by file name), and the problems.

    The convention:

    * ``NAME.yaml`` / ``NAME.yml``: ``{response: {status, headers, json|body}, request: {...},
      route: {...}}`` -- one response in a test case's shape; a test case file (``cases:``)
      counts each of its cases.
    * any other file is a raw body. Its status is the three digits its name starts with
      (``503-nginx.html``, ``422_fastapi.json``); its Content-Type follows the extension (``.json``,
      ``.html``, ``.txt``, ``.xml``). A sidecar ``FILE.meta.yaml`` (``503-nginx.html.meta.yaml``)
      may give ``status``, ``headers``, ``request`` and ``route`` instead or in addition, and
      ``deliberate: REASON`` when only a fallback should explain the response (it is then listed
      apart, with the reason, not among the responses to write a rule for).
    * names starting with ``.`` are ignored.
    """
    if not directory.is_dir():
        return [], [f"{directory}:1: not a directory of recorded responses"]
    out: list[RecordedResponse] = []
    problems: list[str] = []
    for file in sorted(directory.iterdir()):
        if not file.is_file() or file.name.startswith(".") or file.name.endswith(_META):
            continue
        try:
            if file.suffix in {".yaml", ".yml"}:
                out.extend(_from_yaml(file))
            else:
                out.append(_from_body_file(file))
        except RuleError as exc:
            problems.extend(exc.problems)
    return out, problems


@dataclass
class Coverage:
    total: int = 0
    by_rule: dict[str, int] = field(default_factory=dict)
    fallback_only: list[tuple[str, str, str]] = field(default_factory=list)  # name, rule, code
    #: fallback-only on purpose: name, rule, code, the recorded reason
    deliberate: list[tuple[str, str, str, str]] = field(default_factory=list)
    passthrough: list[str] = field(default_factory=list)

    @property
    def specific(self) -> int:
        return sum(self.by_rule.values())

    def lines(self) -> list[str]:
        out = [
            f"coverage: {self.total} responses: {self.specific} matched specific rules, "
            f"{len(self.fallback_only)} only a fallback, "
            + (f"{len(self.deliberate)} left to a fallback on purpose, " if self.deliberate else "")
            + f"{len(self.passthrough)} passed through"
        ]
        if self.by_rule:
            out.append("matched specific rules:")
            width = max(len(r) for r in self.by_rule)
            out.extend(
                f"  {rule:<{width}}  {n}"
                for rule, n in sorted(self.by_rule.items(), key=lambda kv: (-kv[1], kv[0]))
            )
        if self.fallback_only:
            out.append("only a fallback matched (write a rule for these):")
            out.extend(f"  {name}  -> {rule} ({code})" for name, rule, code in self.fallback_only)
        if self.deliberate:
            out.append("left to a fallback on purpose (deliberate:):")
            out.extend(
                f"  {name}  -> {rule} ({code}): {why}" for name, rule, code, why in self.deliberate
            )
        if self.passthrough:
            out.append("passed through (no rule matched):")
            out.extend(f"  {name}" for name in self.passthrough)
        return out


def coverage(
    recorded: Iterable[RecordedResponse], ruleset_for: Callable[[tuple[str, ...]], RuleSet]
) -> Coverage:
    """Which rule answers each recorded response; ``ruleset_for(success_rules)`` picks the set."""
    result = Coverage()
    for item in recorded:
        result.total += 1
        ruleset = ruleset_for(item.success_rules)
        evaluation = run_exchange(ruleset, exchange_for(item.request, item.response))
        if evaluation is None:
            result.passthrough.append(item.name)
            continue
        rule = evaluation.match.rule
        if rule.is_fallback and item.deliberate:
            result.deliberate.append(
                (item.name, rule.id, evaluation.envelope.code, item.deliberate)
            )
        elif rule.is_fallback:
            result.fallback_only.append((item.name, rule.id, evaluation.envelope.code))
        else:
            result.by_rule[rule.id] = result.by_rule.get(rule.id, 0) + 1
    return result
