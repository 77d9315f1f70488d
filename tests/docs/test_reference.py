"""The generated references cannot drift: every settings and rule-file field has a description
(its ``#:`` comment), and Getting started's flags table names exactly ``mend run``'s options."""

from __future__ import annotations

import argparse
import re

import pytest
from pydantic import BaseModel

from docsgen import cli, models
from proxy.config.settings import Settings
from proxy.policy.rules.rulespec import RuleFile
from proxy.tools.cli import _parser
from tests.docs.pages import DOCS

FIELDS = [
    (model, row.key)
    for root in (Settings, RuleFile)
    for model in models.models_below(root)
    for row in models.rows(model)
]


@pytest.mark.parametrize(
    ("model", "key"), FIELDS, ids=[f"{model.__name__}.{key}" for model, key in FIELDS]
)
def test_every_field_has_a_description(model: type[BaseModel], key: str) -> None:
    """The field has a ``#:`` comment directly above it: the reference's text for it."""
    (row,) = [row for row in models.rows(model) if row.key == key]
    assert row.description, f"{model.__module__}.{model.__name__}.{key} has no #: comment"


def test_a_field_without_a_comment_has_no_description() -> None:
    """A field with no ``#:`` line above it (or a plain ``#`` one) reads as undescribed."""

    class Probe(BaseModel):
        #: described
        a: int = 1
        # not a doc comment
        b: int = 2
        c: int = 3

    assert [(r.key, r.description) for r in models.rows(Probe)] == [
        ("a", "described"),
        ("b", ""),
        ("c", ""),
    ]


def _run_options() -> set[str]:
    run = cli._commands(_parser())["run"]
    return {
        option
        for action in run._actions
        if not isinstance(action, argparse._HelpAction)
        for option in action.option_strings
    }


def test_the_getting_started_flags_table_names_every_run_option() -> None:
    """Each ``mend run`` option is in Getting started's table, and the table names no other."""
    page = (DOCS / "getting-started.md").read_text(encoding="utf-8")
    table = [line for line in page.splitlines() if line.startswith("| `--")]
    written = {flag for line in table for flag in re.findall(r"`(--[a-z-]+)", line)}
    assert written == _run_options()


def test_the_cli_reference_names_every_command() -> None:
    """The generated CLI reference has a section for each ``mend`` command."""
    text = cli.markdown()
    for name in cli._commands(_parser()):
        assert f"## mend {name}\n" in text
