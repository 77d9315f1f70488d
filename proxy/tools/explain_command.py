"""``mend explain``: the command line of an explained response, its OpenAPI use, its redaction."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

import orjson
from multidict import CIMultiDict, MultiDict

from proxy.config.choices import ProtocolName
from proxy.config.route import Route
from proxy.config.sources import load_settings
from proxy.config.yamlfile import RuleError
from proxy.policy import json_depth
from proxy.policy.exchange import NOT_JSON
from proxy.policy.redaction.sets import build_set, load_shipped
from proxy.policy.rules.ruleengine import Engine

if TYPE_CHECKING:  # what only `mend explain` uses, imported by it
    from proxy.policy import explanation as explaining
    from proxy.policy.openapi.spec import Spec


def explain(args: argparse.Namespace) -> int:
    from proxy.policy import explanation as explaining  # noqa: PLC0415 - a subcommand's own modules
    from proxy.tools.ruletest.engines import engine_settings  # noqa: PLC0415

    if args.redact is not None:
        return _explain_redaction(args)
    if args.status is None:
        print("mend explain: give --status (or --redact FILE)", file=sys.stderr)
        return 2
    try:
        if args.body_file:
            body_file: Path | None = Path(args.body_file)
            body = Path(args.body_file).read_bytes()
        else:
            body_file, body = None, (args.body or "").encode()
        exchange = explaining.exchange_from(
            status=args.status,
            body=body,
            headers=args.header or (),
            method=args.method,
            path=args.path,
            request_headers=args.request_header or (),
            body_file=body_file,
        )
        rules = [Path(p) for p in args.rules or ()]
        if args.config:
            settings = load_settings(Path(args.config))
            settings = settings.model_copy(update={"rules": (*rules, *settings.rules)})
        else:
            settings = engine_settings(
                rules,
                default_packs=not args.no_default_packs,
                success_rules=args.success_rules or (),
            )
        route = explaining.route_for(settings, args.route, args.path)
        engine = Engine.load(settings)
    except RuleError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"mend explain: {exc}", file=sys.stderr)
        return 2
    try:
        request_body = _request_body(args, route)
    except OSError as exc:
        print(f"mend explain: {exc}", file=sys.stderr)
        return 2
    result = explaining.explain(
        engine, route.name, exchange, explaining.build_options(settings), request_body
    )
    spec = engine.specs.get(route.name)
    used = _explain_openapi(args, spec, route, result, request_body) if spec else None
    if args.json:
        document = explaining.as_json(result, show_all=args.all)
        print(orjson.dumps({**document, **({"openapi": used} if used else {})}).decode())
    else:
        print(explaining.as_text(result, show_all=args.all))
        if used:
            print("\nopenapi:\n" + orjson.dumps(used, option=orjson.OPT_INDENT_2).decode())
    return 0


def _explain_openapi(
    args: argparse.Namespace,
    spec: Spec,
    route: Route,
    result: explaining.Explanation,
    request_body: explaining.RequestBody,
) -> dict[str, Any]:
    """The route's document applied to the explained envelope (in place), and what it used."""
    from proxy.policy import explanation as explaining  # noqa: PLC0415 - a subcommand's own modules
    from proxy.policy.openapi import report as openapi_report  # noqa: PLC0415
    from proxy.policy.openapi.agent_request import Request as EnrichRequest  # noqa: PLC0415
    from proxy.policy.openapi.spec import Mount  # noqa: PLC0415

    sent = json_depth.loads(request_body.body) if request_body.body else NOT_JSON
    request = EnrichRequest(
        method=args.method.upper(),
        path=args.path.partition("?")[0],
        query=MultiDict(parse_qsl(args.query or "", keep_blank_values=True)),
        headers=CIMultiDict(explaining.parse_header(h) for h in args.request_header or ()),
        response_json=result.exchange.json if result.exchange.is_json else None,
        request_json=sent,
    )
    mount = Mount.of(route)
    evaluation = result.evaluation
    envelope, used = openapi_report.explained(
        spec, mount, request, evaluation.envelope if evaluation else None
    )
    if evaluation is not None and envelope is not None and result.protocol == "http":
        evaluation.envelope = envelope
    return used


def _explain_redaction(args: argparse.Namespace) -> int:
    """``explain --redact FILE``: the text as an agent and as the log get it, act by act, with
    the shipped detectors (and, with ``--config``, the route's ``redaction:`` additions)."""
    from proxy.policy import explanation as explaining  # noqa: PLC0415 - a subcommand's own modules
    from proxy.policy.redaction import effects as redaction_explain  # noqa: PLC0415

    try:
        if args.redact == "-":
            text = sys.stdin.read()
        else:
            text = Path(args.redact).read_bytes().decode("utf-8", errors="replace")
        if args.config:
            settings = load_settings(Path(args.config))
            route = explaining.route_for(settings, args.route, args.path)
            detectors = Engine.load(settings).redactor_for(route.name).detectors
        else:
            detectors = build_set(load_shipped())
    except RuleError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"mend explain: {exc}", file=sys.stderr)
        return 2
    explained = redaction_explain.explain_text(text, detectors)
    if args.json:
        print(orjson.dumps(redaction_explain.as_json(explained)).decode())
    else:
        print(redaction_explain.as_text(explained), end="")
    return 0


def _request_body(args: argparse.Namespace, route: Route) -> explaining.RequestBody:
    """``--protocol`` (else the route's, as ``mend run`` has it) and the request's body and
    query, for a protocol's answer."""
    from proxy.policy import explanation as explaining  # noqa: PLC0415 - a subcommand's own modules

    if args.request_body_file:
        body: bytes | None = Path(args.request_body_file).read_bytes()
    else:
        body = args.request_body.encode() if args.request_body is not None else None
    protocol = ProtocolName(args.protocol) if args.protocol else route.protocol
    return explaining.RequestBody(protocol, body, args.query or "")
