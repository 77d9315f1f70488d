"""For a path or method the document lacks: the nearest documented operations, as the next one."""

from __future__ import annotations

import difflib
from typing import Any
from urllib.parse import unquote

from proxy.policy.envelope import Action, Envelope
from proxy.policy.openapi.agent_request import Request
from proxy.policy.openapi.examples import example_request
from proxy.policy.openapi.operations import PathMatch, Template, split
from proxy.policy.openapi.spec import Mount, Spec

#: Operations named in ``allowed_values.operations`` for an undocumented path.
NEAREST = 3
#: Templates compared with an undocumented path (a document may have thousands).
_COMPARED = 500


#: Characters of a path segment compared when looking for the nearest template.
_SEGMENT_CHARS = 64
#: Methods an agent probably meant instead of the one it sent.
_KIN = {
    "PUT": ("PATCH", "POST"),
    "PATCH": ("PUT", "POST"),
    "POST": ("PUT", "PATCH"),
    "HEAD": ("GET",),
    "GET": ("HEAD",),
}


def nearest_redirect(
    envelope: Envelope,
    spec: Spec,
    mount: Mount,
    request: Request,
    spec_path: str,
    match: PathMatch | None,
) -> Envelope:
    """A 404 or 405 on a path or method the document lacks: the nearest documented operation."""
    method = request.method.upper()
    candidates = _nearest(spec, method, spec_path, match)
    if not candidates:
        return envelope
    operations = [f"{m} {spec.agent_path(t.path, mount)}" for m, t, _ in candidates]
    chosen_method, template, params = candidates[0]
    # the methods of the path sent when it is documented (a 405's Allow), else the suggestion's
    methods = sorted((match.template if match is not None else template).methods)
    allowed: dict[str, Any] = {"methods": methods, "operations": operations}
    next_operation = operations[0]
    hint = (
        f"{method} {unquote(request.path)[:200]} is not an operation of this API; "
        f"send {next_operation} instead."
    )
    target = template.methods[chosen_method]
    update: dict[str, Any] = {
        "next_operation": next_operation,
        "next_operation_args": params or None,
        "allowed_values": allowed,
        "suggested_value": next_operation,
        "example_request": example_request(spec, mount, target, params),
    }
    if not envelope.retryable:  # a retry (a gateway's 404 during a deploy) stays a retry
        update["action"] = Action.CALL_OTHER_OPERATION
        update["hint"] = hint
        update["steps"] = (f"Send {next_operation} instead.",)
    return envelope.model_copy(update=update)


def _nearest(
    spec: Spec, method: str, spec_path: str, match: PathMatch | None = None
) -> list[tuple[str, Template, dict[str, str]]]:
    """The documented operations nearest ``method spec_path``, path and method weighed
    together: the path segment by segment (0 to 2, a template parameter fitting anything), plus
    1 for the method sent and 0.4 for a kindred one, so ``GET /pets`` is nearer ``GET
    /pet/findByStatus`` than ``POST /pet``, and ``POST /user/repo`` nearer ``POST /user/repos``
    than ``GET /user/{account_id}``, whose template the path fits."""
    segments = [s[:_SEGMENT_CHARS] for s in split(spec_path)[:16]]
    scored: list[tuple[float, str, Template, dict[str, str]]] = []
    # templates of about the request's length, at most _COMPARED of them: a 404 must stay cheap
    near = [t for t in spec.operations.templates if abs(len(t.literals) - len(segments)) <= 1]
    near = near[:_COMPARED]
    if match is not None and all(t is not match.template for t in near):
        near.append(match.template)
    for template in near:
        score, params = _path_score(segments, template)
        if match is not None and template is match.template:
            params = dict(match.params)
        for op_method in template.methods:
            kin = _KIN.get(method, ())
            bonus = 1.0 if op_method == method else 0.4 if op_method in kin else 0.0
            scored.append((score + bonus, op_method, template, params))
    scored.sort(key=lambda item: (-item[0], item[2].path, item[1]))
    return [(m, t, p) for _, m, t, p in scored[:NEAREST]]


def _path_score(segments: list[str], template: Template) -> tuple[float, dict[str, str]]:
    literals = template.literals
    length = max(len(segments), len(literals), 1)
    score = 0.0
    params: dict[str, str] = {}
    for index, (sent, literal) in enumerate(zip(segments, literals, strict=False)):
        if literal is None:
            score += 0.75
            pattern = template.patterns[index]
            if pattern is not None and len(pattern[1]) == 1:
                params[pattern[1][0]] = unquote(sent)
        else:
            score += difflib.SequenceMatcher(None, sent.lower(), literal.lower()).ratio()
    if len(segments) != len(literals):
        params = {}
    return score / length * 2, params
