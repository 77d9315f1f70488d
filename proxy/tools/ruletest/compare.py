"""What a case expected against what it got: a subset compared, each difference by its path."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

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
        return _dict_differences(expected, got, path)
    if isinstance(expected, list):
        return _list_differences(expected, got, path)
    if got is _MISSING or not _same_scalar(expected, got):
        return [Difference(path, expected, got)]
    return []


def _dict_differences(expected: dict[Any, Any], got: Any, path: str) -> list[Difference]:
    """Each key of ``expected`` compared with ``got``'s, which must be a mapping."""
    if not isinstance(got, dict):
        return [Difference(path or "(envelope)", expected, got)]
    out: list[Difference] = []
    for key, value in expected.items():
        sub = f"{path}.{key}" if path else str(key)
        out.extend(differences(value, got.get(key, _MISSING), sub))
    return out


def _list_differences(expected: list[Any], got: Any, path: str) -> list[Difference]:
    """Each element of ``expected`` compared with ``got``'s at its position; as many of them."""
    if not isinstance(got, list):
        return [Difference(path, expected, got)]
    if len(expected) != len(got):
        return [Difference(f"{path} (length {len(expected)} vs {len(got)})", expected, got)]
    return [
        d
        for i, (e, g) in enumerate(zip(expected, got, strict=True))
        for d in differences(e, g, f"{path}[{i}]")
    ]
