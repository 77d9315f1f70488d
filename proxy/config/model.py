"""The base of every settings model: frozen, and an unknown key is an error."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """A settings block: immutable once read, and a misspelt key is refused, not ignored."""

    model_config = ConfigDict(frozen=True, extra="forbid")
