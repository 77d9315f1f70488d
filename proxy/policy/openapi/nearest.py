"""For a path or method the document lacks: the nearest documented operations, as the next one."""

from __future__ import annotations

import difflib
from typing import Any
from urllib.parse import unquote

from proxy.policy.envelope.model import Action, Envelope
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


#: How alike a sent segment and a literal must be to name the same resource (``pets``, ``pet``:
#: 0.86; ``repo``, ``repos``: 0.89; ``issues``, ``releases``: 0.71).
_SAME_RESOURCE = 0.8
#: Leading segments of the sent path that may stand before the document's paths (``/v3``).
_PREFIXES = 1

_Candidate = tuple[str, Template, dict[str, str]]


def _nearest(
    spec: Spec, method: str, spec_path: str, match: PathMatch | None = None
) -> list[_Candidate]:
    """The documented operations an agent meant by ``method spec_path``, the resource first.

    A documented path sent with a method it lacks: that path's operations (its ``Allow``), a
    kindred method first (``PUT`` for ``POST``), then ``GET``; unless the path was documented
    only through a template parameter that a literal of the method sent fits better (``POST
    /user/repo``: ``POST /user/repos``, not ``GET /user/{account_id}``). A path the document
    lacks: the operations on the resource the path addresses, each of its segments naming the
    same thing (a literal alike, or a template parameter) before the method is weighed, so
    ``GET /pets`` is sent to ``GET /pet/findByStatus``, never to an operation on another
    resource because its method matches; a leading segment the document does not have
    (``/v3``) is passed over. Nothing on that resource: none, rather than a guess."""
    segments = [s[:_SEGMENT_CHARS] for s in split(spec_path)[:16]]
    found = _on_resource(spec, method, segments)
    if match is None:
        return [(m, t, p) for *_, m, t, p in found[:NEAREST]]
    own = _same_resource(segments, match.template)
    bar = own[0] if own is not None else 0.0
    better = [(m, t, p) for _, rank, score, _, m, t, p in found if rank == 0 and -score > bar]
    return [*better, *_allowed(method, match)][:NEAREST]


_Scored = tuple[int, int, float, str, str, Template, dict[str, str]]


def _on_resource(spec: Spec, method: str, segments: list[str]) -> list[_Scored]:
    """Every documented operation on the resource ``segments`` address, nearest first: a
    skipped leading segment last, then the method sent, a kindred one, any; then the path."""
    scored: list[_Scored] = []
    for skip in range(min(_PREFIXES, max(len(segments) - 1, 0)) + 1):
        sent = segments[skip:]
        near = [t for t in spec.operations.templates if abs(len(t.literals) - len(sent)) <= 1]
        for template in near[:_COMPARED]:
            found = _same_resource(sent, template)
            if found is None:
                continue
            score, params = found
            for op_method in template.methods:
                rank = _method_rank(method, op_method)
                scored.append((skip, rank, -score, template.path, op_method, template, params))
        if scored:
            scored = _most_specific(scored, len(sent))
            break
    scored.sort(key=lambda item: item[:5])
    return scored


def _most_specific(scored: list[_Scored], sent: int) -> list[_Scored]:
    """The candidates that say the most of the path sent: those that read each of its
    ``sent`` segments, when any does (a template a segment shorter names the parent: ``POST
    /pet/{petId}`` for ``/pet/7/uploadImag``); then, at each segment, a literal alike it over
    a template parameter that would take any word (``/orgs/{org}/packages`` for
    ``/orgs/x/package``, not ``/orgs/{org}/{security_product}/{enablement}``)."""
    if any(len(item[5].literals) >= sent for item in scored):
        scored = [item for item in scored if len(item[5].literals) >= sent]
    for index in range(sent):
        if any(_literal_at(item[5], index) for item in scored):
            scored = [item for item in scored if not _parameter_at(item[5], index)]
    return scored


def _literal_at(template: Template, index: int) -> bool:
    return index < len(template.literals) and template.literals[index] is not None


def _parameter_at(template: Template, index: int) -> bool:
    """Whether ``template`` has a parameter at segment ``index`` (not a literal, nor its end)."""
    return index < len(template.literals) and template.literals[index] is None


def _allowed(method: str, match: PathMatch) -> list[_Candidate]:
    """The operations of the documented path sent, the method meant first."""
    methods = sorted(match.template.methods, key=lambda m: (_method_rank(method, m), m != "GET", m))
    return [(m, match.template, dict(match.params)) for m in methods[:NEAREST]]


def _method_rank(sent: str, documented: str) -> int:
    """0: the method sent; 1: a kindred one; 2: any other."""
    if documented == sent:
        return 0
    return 1 if documented in _KIN.get(sent, ()) else 2


def _same_resource(segments: list[str], template: Template) -> tuple[float, dict[str, str]] | None:
    """How near ``segments`` are ``template`` (0 to 2), when each names what the template's
    segment does; ``None``: they address another resource."""
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
            continue
        alike = difflib.SequenceMatcher(None, sent.lower(), literal.lower()).ratio()
        if alike < _SAME_RESOURCE:
            return None
        score += alike
    if len(segments) != len(literals):
        params = {}
    return score / length * 2, params
