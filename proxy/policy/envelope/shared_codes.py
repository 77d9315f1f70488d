"""What each shared code means: ``proxy/policy/envelope/codes.yaml``, read once, validated on load.

The error catalog describes a code produced by several rules (or by a fallback) from here, not
from whichever rule came first; a code only one rule produces is described by that rule.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from proxy.config.yamlfile import RuleError, parse_yaml, validation_problems

CODES = Path(__file__).resolve().parent / "codes.yaml"


class CodeDoc(BaseModel):
    """One code's description: what it means, why it happens, what an agent does about it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    summary: str = Field(min_length=1)
    cause: str = Field(min_length=1)
    fix: str = Field(min_length=1)
    #: the rule whose envelope is the page's example (default: the first that has one)
    example_rule: str | None = None


class CodeDocs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    codes: dict[str, CodeDoc]


def load_codes(path: Path = CODES) -> dict[str, CodeDoc]:
    """The descriptions in ``path``; ``RuleError`` with ``file:line`` when it does not validate."""
    data, lines = parse_yaml(path.read_text(encoding="utf-8"), str(path))
    try:
        return dict(CodeDocs.model_validate(data).codes)
    except ValidationError as exc:
        raise RuleError(validation_problems(exc, str(path), lines, CodeDocs)) from exc
