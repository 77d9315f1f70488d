"""The keys a model allows where a validation error points: for "did you mean 'field'?".

Pydantic says a key is not allowed (``extra_forbidden``) and where (``loc``), not which keys are.
``known_keys`` walks the model's annotations along ``loc`` to the mapping that holds the key and
lists what it may hold; ``did_you_mean`` picks the nearest of them.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

#: Annotations followed at one step of ``loc`` (a union's members count each): a bound on the walk.
_WIDTH_MAX = 64


def _members(annotation: Any) -> Iterator[Any]:
    """``annotation`` with its unions and ``Annotated`` taken apart."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        yield from _members(typing.get_args(annotation)[0])
    elif origin is typing.Union or origin is types.UnionType:
        for arg in typing.get_args(annotation):
            yield from _members(arg)
    else:
        yield annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _name(annotation: Any) -> str:
    return annotation.__name__ if isinstance(annotation, type) else str(annotation)


def _field(model: type[BaseModel], key: str) -> Any:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return info.annotation
    return None


def _step(annotation: Any, part: Any) -> list[Any]:
    """What ``annotation`` holds at ``part`` of a ``loc``: a field, an item, a value."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if _is_model(annotation) and isinstance(part, str):
        found = _field(annotation, part)
        return [] if found is None else list(_members(found))
    if isinstance(part, int) and origin in (list, tuple, Sequence, set, frozenset) and args:
        return [m for arg in args if arg is not Ellipsis for m in _members(arg)]
    if origin in (dict, Mapping) and len(args) == 2:
        return list(_members(args[1]))
    return []


def known_keys(model: type[BaseModel], loc: Sequence[Any]) -> list[str]:
    """The keys (aliases where a field has one) of the model(s) holding ``loc``'s last key."""
    at: list[Any] = [model]
    for part in loc[:-1]:
        stepped = [found for annotation in at for found in _step(annotation, part)][:_WIDTH_MAX]
        if stepped:
            at = stepped
        elif isinstance(part, str):  # a union member's tag ("InvalidFieldsSpec", "list[...]")
            at = [a for a in at if _name(a) == part] or at
        else:
            return []
    keys: list[str] = []
    for annotation in at:
        if _is_model(annotation):
            keys.extend(info.alias or name for name, info in annotation.model_fields.items())
    return list(dict.fromkeys(keys))


def did_you_mean(model: type[BaseModel] | None, loc: Sequence[Any]) -> str:
    """``"; did you mean 'field'?"`` for an unknown key at ``loc`` near a known one, else ``""``."""
    if model is None or not loc or not isinstance(loc[-1], str):
        return ""
    close = difflib.get_close_matches(loc[-1], known_keys(model, loc), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""
