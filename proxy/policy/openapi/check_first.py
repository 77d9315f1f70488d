"""The read operation a write that may have taken effect is checked by (docs/contract.md §1).

mend sent a POST or PATCH and got no answer: the plan says not to send it again before checking
whether it took effect, and on a route with an OpenAPI document it names how: a ``GET`` on the
same path (``PATCH /orders/{id}`` -> ``GET /orders/{id}``; ``POST /orders`` -> ``GET /orders``),
else a ``GET`` on an item of it (``POST /orders`` -> ``GET /orders/{id}``).
"""

from __future__ import annotations

from urllib.parse import unquote

from proxy.policy.envelope.model import Action, Envelope
from proxy.policy.openapi.operations import PathMatch
from proxy.policy.openapi.spec import Mount, Spec
from proxy.policy.retry.resend import check_with


def read_operation(spec: Spec, match: PathMatch, mount: Mount) -> str | None:
    """``GET <agent path template>`` of the operation that reads what ``match`` writes."""
    template = match.template
    if "GET" in template.methods:
        return f"GET {spec.agent_path(template.path, mount)}"
    prefix = template.path.rstrip("/") + "/{"
    for other in spec.operations.templates:
        item = other.path[len(prefix) - 1 :] if other.path.startswith(prefix) else ""
        if "GET" in other.methods and item.endswith("}") and "/" not in item:
            return f"GET {spec.agent_path(other.path, mount)}"
    return None


def checked_first(
    envelope: Envelope, spec: Spec, mount: Mount, method: str, agent_path: str
) -> Envelope:
    """``envelope`` (a write that may have taken effect) with the read operation to call first,
    when the document has one; as it was otherwise."""
    located = spec.locate(method, agent_path, mount)
    if located is None or located.match is None:
        return envelope
    reader = read_operation(spec, located.match, mount)
    if reader is None:
        return envelope
    hint, steps = check_with(f"{method} {unquote(agent_path)[:200]}", reader)
    return envelope.model_copy(
        update={
            "action": Action.CALL_OTHER_OPERATION,
            "next_operation": reader,
            "next_operation_args": dict(located.match.params) or None,
            "hint": hint,
            "steps": tuple(steps),
        }
    )
