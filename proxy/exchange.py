"""What rules look at: one request and the upstream's (error) response, read once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final


class _NotJson:
    """Sentinel: the body did not parse as JSON (``None`` is valid JSON)."""

    def __repr__(self) -> str:
        return "NOT_JSON"


NOT_JSON: Final = _NotJson()


@dataclass(slots=True)
class Exchange:
    method: str
    path: str
    route: str
    request_id: str
    request_headers: Mapping[str, str]
    status: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    content_type: str = ""
    text: str = ""
    json: Any = NOT_JSON
    truncated: bool = False

    @property
    def is_json(self) -> bool:
        return self.json is not NOT_JSON
