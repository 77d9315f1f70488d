"""What a circuit covers (docs/contract.md §7): one operation, named by method and path shape.

The documented OpenAPI operation when the route has a document (``METHOD /orders/{id}``, the
caller passes its template), else the request's method and path with every segment that looks
like an id collapsed to ``{id}``: ``GET /orders/42`` and ``GET /orders/43`` are one operation,
``GET /orders`` another. The path is the agent's and untrusted: only string methods read it, and
the shape is capped (segments and characters) so the circuit table's keys stay small.
"""

from __future__ import annotations

#: segments kept; deeper ones are folded into one ``**``
MAX_SEGMENTS = 12
#: characters a kept segment may have before it counts as an id
MAX_SEGMENT_CHARS = 40
_HEX = frozenset("0123456789abcdefABCDEF-")


def _is_id(segment: str) -> bool:
    """Digits anywhere (``42``, ``v2-ord-17``), a long hex or UUID, or something too long to be
    a word of the API's vocabulary."""
    if len(segment) > MAX_SEGMENT_CHARS:
        return True
    if any(c.isdigit() for c in segment):
        return True
    return len(segment) >= 16 and all(c in _HEX for c in segment)


def path_shape(path: str) -> str:
    """``/orders/42/items/7?x=1`` -> ``/orders/{id}/items/{id}``."""
    path = path.split("?", 1)[0].split("#", 1)[0]
    segments = path.split("/")[1:]
    shaped = ["{id}" if _is_id(s) else s for s in segments[:MAX_SEGMENTS]]
    if len(segments) > MAX_SEGMENTS:
        shaped.append("**")
    return "/" + "/".join(shaped)


def operation_key(route: str, method: str, path: str, template: str | None = None) -> str:
    """The circuit's key: route, method and the documented template (else the path's shape)."""
    shape = template if template is not None else path_shape(path)
    return f"{route} {method[:16].upper()} {shape}"
