"""The category -> session-level suggestion table (``patterns.yaml``), validated on load."""

from __future__ import annotations

import importlib.resources

from proxy.config.yamlfile import parse_yaml
from proxy.policy.envelope.model import Category


def load_suggestions(text: str | None = None) -> dict[Category, str]:
    """Every category's suggestion; ``ValueError`` naming a missing, unknown or empty one."""
    if text is None:
        text = (importlib.resources.files("proxy.policy.crosscall") / "patterns.yaml").read_text(
            "utf-8"
        )
    data, _ = parse_yaml(text, "patterns.yaml")
    if not isinstance(data, dict):
        raise ValueError("patterns.yaml: a mapping of category to suggestion")
    known = {c.value for c in Category}
    unknown = sorted(set(map(str, data)) - known)
    missing = sorted(known - set(map(str, data)))
    if unknown or missing:
        raise ValueError(f"patterns.yaml: unknown categories {unknown}, missing {missing}")
    table: dict[Category, str] = {}
    for key, value in data.items():
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"patterns.yaml: {key}: the suggestion is a non-empty string")
        table[Category(key)] = value.strip()
    return table
