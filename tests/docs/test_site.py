"""The documentation site builds with ``mkdocs build --strict`` (a broken link, a missing page or a
page left out of the nav fails it), with the generated references in it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.config.route import Route
from proxy.config.settings import Settings
from proxy.policy.rules.rulefile import load_rules
from tests.docs.pages import ROOT

pytest.importorskip("mkdocs")
pytest.importorskip("material")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built strictly from the checkout into a temporary directory."""
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return out


def test_the_site_builds_strictly(site: Path) -> None:
    """Every page of the nav is written, README.md as the front page."""
    for page in ("getting-started", "configuration", "rule-file", "packs", "cli", "contract"):
        assert (site / page / "index.html").is_file(), page
    assert "Two commands" in (site / "index.html").read_text(encoding="utf-8")


def test_the_configuration_reference_shows_every_setting(site: Path) -> None:
    """The generated configuration page has a row for each top-level and route key."""
    page = (site / "configuration" / "index.html").read_text(encoding="utf-8")
    for model in (Settings, Route):
        for name in model.model_fields:
            assert f"<code>{name}</code>" in page, f"{model.__name__}.{name}"


def test_the_packs_catalogue_lists_every_shipped_rule(site: Path) -> None:
    """Each rule id of rules/*.yaml appears in the generated catalogue."""
    page = (site / "packs" / "index.html").read_text(encoding="utf-8")
    rules = load_rules(sorted((ROOT / "rules").glob("*.yaml")))
    assert rules
    for rule in rules:
        assert f"<code>{rule.spec.id}</code>" in page, rule.spec.id


def test_a_strict_build_fails_on_a_broken_link(tmp_path: Path) -> None:
    """The strict build is what catches a page's broken link (the test above can fail)."""
    probe = ROOT / "docs" / "contract.md"
    text = probe.read_text(encoding="utf-8")
    config = tmp_path / "mkdocs.yml"
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(text + "\n[gone](gone.md)\n", encoding="utf-8")
    config.write_text("site_name: probe\ndocs_dir: docs\nstrict: true\n", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert result.returncode != 0
    assert "gone.md" in result.stderr
