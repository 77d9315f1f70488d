"""The CLI reference: every ``mend`` command and its options, from the parser ``mend`` runs."""

from __future__ import annotations

import argparse

from proxy.tools.cli import _parser


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    metavar = ""
    if action.nargs != 0:
        named = action.metavar or action.dest.upper()
        metavar = " " + (named if isinstance(named, str) else " ".join(named))
    return ", ".join(f"`{name}{metavar}`" for name in action.option_strings)


def _default(action: argparse.Action) -> str:
    if action.default in (None, False, argparse.SUPPRESS) or action.nargs == 0:
        return ""
    if isinstance(action.default, list | tuple) and not action.default:
        return ""
    return f"`{action.default}`"


def _cell(text: str | None) -> str:
    return " ".join((text or "").replace("|", "\\|").split())


def markdown() -> str:
    """A section per command: its help line, usage and a table of its arguments."""
    parser = _parser()
    parts: list[str] = []
    for name, command in _commands(parser).items():
        parts.append(f"## mend {name}\n")
        if command.description:
            parts.append(_cell(command.description) + "\n")
        usage = " ".join(command.format_usage().split())
        parts.append(f"```text\n{usage.removeprefix('usage: ')}\n```\n")
        parts.append("| argument | default | what it does |\n|---|---|---|")
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            cells = (_flags(action), _default(action), _cell(action.help))
            parts.append("| " + " | ".join(cells) + " |")
        parts.append("")
    return "\n".join(parts)
