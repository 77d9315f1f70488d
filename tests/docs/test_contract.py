"""The contract page keeps step with the envelope the code builds: every field of ``Envelope``
and of an invalid field has its words in §1, and every category, action and severity is named."""

from __future__ import annotations

import re

import pytest

from proxy.policy.envelope.model import Action, Category, Envelope, InvalidField, Severity
from tests.docs.pages import DOCS

CONTRACT = (DOCS / "contract.md").read_text(encoding="utf-8")
SECTION_1 = CONTRACT.split("\n## 2.", 1)[0]
#: the first column of §1's table: ``| code |``, ``| field / invalid_fields |``
ROWS = {
    name.strip()
    for cell in re.findall(r"^\| ([a-z_ /]+) \|", SECTION_1, re.M)
    for name in cell.split("/")
}


@pytest.mark.parametrize("name", list(Envelope.model_fields))
def test_every_envelope_field_has_a_row(name: str) -> None:
    """An envelope field the code sends is described in §1's table."""
    assert name in ROWS


@pytest.mark.parametrize("name", list(InvalidField.model_fields))
def test_every_invalid_field_member_is_named(name: str) -> None:
    """A member of an ``invalid_fields[]`` entry is named in §1."""
    assert f"`{name}`" in SECTION_1


@pytest.mark.parametrize("value", [*Category, *Action, *Severity], ids=str)
def test_every_category_action_and_severity_is_named(value: str) -> None:
    """The table's category, action and severity rows name every value the code has."""
    assert f"`{value}`" in SECTION_1
