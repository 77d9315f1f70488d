"""The model's own argument values survive redaction (policy/redaction/echo.py), not secrets."""

from __future__ import annotations

from proxy.policy.redaction import Redactor
from proxy.policy.redaction.echo import keeping, kept_values


def test_values_inside_values_come_back_exactly() -> None:
    """A value that is part of another (and one that is a word of the placeholders) is set
    aside once and put back as sent; the internal address the text adds is still cut."""
    redactor = Redactor(neutral="")
    values = kept_values(redactor, ["http://127.0.0.1:9/value", "value"])
    scrub = keeping(redactor.scrub, values)
    text = "Failed to fetch http://127.0.0.1:9/value: refused by 10.0.0.7; value"
    kept = scrub(text).text
    assert kept.startswith("Failed to fetch http://127.0.0.1:9/value: refused by ")
    assert kept.endswith("; value")
    assert "10.0.0.7" not in kept
    assert "Mendkept" not in kept


def test_a_value_holding_a_secret_is_not_kept() -> None:
    """A URL with a password is not among the kept values, so scrub masks it as ever."""
    redactor = Redactor(neutral="")
    secret = "postgres://admin:Pl4ntedSecret@db.internal:5432/app"
    assert kept_values(redactor, [secret, "Mars/Olympus"]) == ("Mars/Olympus",)
