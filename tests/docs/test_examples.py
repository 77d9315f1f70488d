"""The examples of README.md and docs/ run: every YAML example is a config, rule or case file
that mend's own loaders accept, and every shell block marked ``<!-- example: runs -->`` (or
``runs-slow``) exits 0.

A YAML block that is none of those (a compose file's lines, a part of a longer file) says so
with ``<!-- example: fragment -->`` on the line before it."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from proxy.config.settings import Settings
from proxy.config.sources import load_settings
from proxy.config.yamlfile import parse_yaml
from proxy.tools.ruletest.cases import CaseFile
from tests.docs.pages import ROOT, Block, blocks, markdown_files

ALL = [block for page in markdown_files() for block in blocks(page)]
YAML = [b for b in ALL if b.lang in ("yaml", "yml") and b.mark != "fragment"]
#: ``runs-slow``: a block that takes tens of seconds (``mend test`` over every pack): test-slow
SHELL = [
    pytest.param(b, id=b.where, marks=[pytest.mark.slow] if b.mark == "runs-slow" else [])
    for b in ALL
    if b.mark in ("runs", "runs-slow")
]

#: a route for a settings block shown without one (``redaction:``, ``public_url:``)
_ROUTE = {"name": "example", "upstream": "http://127.0.0.1:9"}


def _kind(data: Any) -> str:
    """What file a YAML example is: ``config``, ``rules`` or ``cases``."""
    if isinstance(data, list) and data and all(isinstance(i, dict) for i in data):
        return "rules" if all("id" in i for i in data) else "cases"
    if not isinstance(data, dict):
        return "unknown"
    if "cases" in data:
        return "cases"
    rules = data.get("rules")
    if "pack" in data or (rules and all(isinstance(r, dict) for r in rules)):
        return "rules"
    return "config" if set(data) <= set(Settings.model_fields) else "unknown"


def _mend(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("block", YAML, ids=[b.where for b in YAML])
def test_a_yaml_example_is_a_file_mend_accepts(block: Block, tmp_path: Path) -> None:
    """The example loads as what it is: a config file through mend's settings loader, a rule
    file through ``mend check``, a case file through the case schema of ``mend test``."""
    data, _ = parse_yaml(block.text, block.where)
    kind = _kind(data)
    assert kind != "unknown", f"{block.where}: not a config, rule or case file (mark a fragment)"
    if kind == "config":
        config = tmp_path / "mend.yaml"
        config.write_text(block.text, encoding="utf-8")
        if "routes" not in data:
            config.write_text(
                block.text + f"\nroutes: [{{name: example, upstream: {_ROUTE['upstream']}}}]\n"
            )
        load_settings(config)
    elif kind == "rules":
        rules = tmp_path / "example.yaml"
        rules.write_text(block.text, encoding="utf-8")
        result = _mend("check", str(rules), cwd=tmp_path)
        assert result.returncode == 0, f"{block.where}:\n{result.stdout}{result.stderr}"
    else:
        CaseFile.model_validate({"cases": data} if isinstance(data, list) else data)


def test_a_broken_yaml_example_is_refused(tmp_path: Path) -> None:
    """A rule example with a misspelt key fails the test above (it can fail)."""
    page = tmp_path / "page.md"
    page.write_text("```yaml\nrules:\n  - id: x.y\n    wen: {status: 404}\n```\n")
    (block,) = blocks(page)
    rules = tmp_path / "example.yaml"
    rules.write_text(block.text, encoding="utf-8")
    result = _mend("check", str(rules), cwd=tmp_path)
    assert result.returncode != 0
    assert "wen" in result.stdout + result.stderr


def _checkout_copy(tmp_path: Path) -> Path:
    """A working directory that sees the checkout's files (links to them) and keeps what a
    command writes out of the checkout."""
    for entry in ROOT.iterdir():
        if entry.name not in (".git", ".venv"):
            (tmp_path / entry.name).symlink_to(entry)
    return tmp_path


def _commands(block: Block) -> list[str]:
    return [
        line.split(" #", 1)[0].strip()
        for line in block.text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


@pytest.mark.parametrize("block", SHELL)
def test_a_runnable_shell_example_exits_zero(block: Block, tmp_path: Path) -> None:
    """Each command of the block, run from the checkout as a user types it, exits 0."""
    cwd = _checkout_copy(tmp_path)
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    for command in _commands(block):
        assert shlex.split(command)[0] in ("mend", ".venv/bin/mend"), command
        result = subprocess.run(
            ["bash", "-c", command],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, f"{block.where}: {command}\n{result.stdout}{result.stderr}"


def test_there_are_runnable_examples() -> None:
    """The pages mark some shell examples runnable, and every YAML one is checked or marked."""
    assert len(SHELL) >= 2
    assert len(YAML) >= 6
