"""Counts as the command line says them: ``1 rule``, ``2 rules``."""

from __future__ import annotations


def counted(count: int, noun: str) -> str:
    """``count`` and ``noun``, plural (an ``s``) unless there is exactly one."""
    return f"{count} {noun}{'' if count == 1 else 's'}"
