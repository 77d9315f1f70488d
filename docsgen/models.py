"""The reference tables of a tree of Pydantic models: one table per model, a row per field."""

from __future__ import annotations

import enum
import json
import re
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from docsgen.comments import field_comments


@dataclass(frozen=True, slots=True)
class Row:
    """One field as the reference shows it."""

    key: str
    type: str
    default: str
    description: str


def models_below(root: type[BaseModel]) -> list[type[BaseModel]]:
    """``root`` and every model its fields hold, at any depth, each once, in the order met."""
    seen: list[type[BaseModel]] = []
    pending = [root]
    while pending:
        model = pending.pop(0)
        if model in seen:
            continue
        seen.append(model)
        for info in model.model_fields.values():
            pending.extend(_models_in(info.annotation))
    return seen


def _models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from _models_in(arg)


def rows(model: type[BaseModel]) -> list[Row]:
    """The fields of ``model`` in their declared order, described by their ``#:`` comments."""
    comments: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if isinstance(cls, type) and issubclass(cls, BaseModel) and cls is not BaseModel:
            comments.update(field_comments(cls))
    return [
        Row(
            key=info.alias or name,
            type=type_name(info.annotation),
            default=_default(info),
            description=comments.get(name, ""),
        )
        for name, info in model.model_fields.items()
    ]


def type_name(annotation: Any) -> str:
    """A field's type in the words of a YAML file: string, integer, list of ..., one of ..."""
    origin = typing.get_origin(annotation)
    if origin is not None:
        return _generic_name(origin, typing.get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " or ".join(f"`{member.value}`" for member in annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{anchor(annotation)})"
    return _SCALARS.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _generic_name(origin: Any, args: tuple[Any, ...]) -> str:
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(arg) for arg in args)
    if origin is typing.Literal:
        return " or ".join(f"`{_yaml(arg)}`" for arg in args)
    if origin is dict:
        return f"map of {type_name(args[0])} to {type_name(args[1])}" if args else "map"
    if origin is typing.Annotated:
        return type_name(args[0])
    return f"list of {type_name(args[0])}" if args else "list"  # tuple, list, set


_SCALARS: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
    Any: "any",
    Path: "path",
}


def anchor(model: type[BaseModel]) -> str:
    """The id of a model's heading on its page (MkDocs' slug of the class name)."""
    return model.__name__.lower()


def _default(info: FieldInfo) -> str:
    if info.default is not PydanticUndefined:
        value = info.default
    elif info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
    else:
        return "required"
    return f"`{_yaml(value)}`"


def _yaml(value: Any) -> str:
    """A default as it is written in a YAML file."""
    if isinstance(value, BaseModel):
        return "{}" if value == type(value)() else json.dumps(value.model_dump(mode="json"))
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str)


def markdown(root: type[BaseModel], level: int = 2) -> str:
    """Every model below ``root`` as a heading, its docstring and its table."""
    parts: list[str] = []
    for model in models_below(root):
        parts.append(f"{'#' * level} {model.__name__}\n")
        doc = model.__doc__ or ""
        if doc:
            parts.append(prose(" ".join(doc.split())) + "\n")
        parts.append("| key | type | default | what it does |\n|---|---|---|---|")
        for row in rows(model):
            cells = (f"`{row.key}`", row.type, row.default, row.description)
            parts.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
        parts.append("")
    return "\n".join(parts)


#: reStructuredText's inline code, as the code's comments write it: ``x``
_RST_CODE = re.compile(r"``([^`]+)``")
#: a citation of the contract in the code: docs/contract.md §N
_CONTRACT = re.compile(r"docs/contract\.md §(\d+)")


def prose(text: str) -> str:
    """A comment or docstring as Markdown: ``x`` is `x`, a contract citation a link to it."""
    text = _RST_CODE.sub(r"`\1`", text)
    return escape_html(_CONTRACT.sub(r"[contract §\1](contract.md)", text))


def escape_html(text: str) -> str:
    """``<`` outside code spans as ``&lt;``, so that ``<prefix>`` is read, not taken for a tag."""
    pieces = text.split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;") for i, p in enumerate(pieces))


def _cell(text: str) -> str:
    return prose(text).replace("|", "\\|").replace("\n", " ")
