"""What every runner shares: its command line, and the JSON line it prints per call.

``python <runner>.py MCP_URL TOOL JSON_ARGUMENTS [TOOL JSON_ARGUMENTS ...]``: for each
(tool, arguments) pair a fresh agent is built whose scripted model calls that one tool with
those arguments, then answers "done"; the runner prints one JSON line per call,
``{"model_read": <the tool result text the framework hands the model>, "raised": null |
"ExceptionType: text"}``. Runners run in their framework's own virtualenv, with this directory
on ``sys.path`` (a script's own directory is).
"""

from __future__ import annotations

import asyncio
import json
import sys
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

#: seconds one call may take, connecting included
CALL_TIMEOUT_S = 60.0
#: what the scripted model answers once it has read the tool's result
DONE = "done"
PROMPT = "Use the tool."

Call = Callable[[str, str, dict[str, Any]], Awaitable[str]]


class RaisedReading(Exception):
    """A run that ended on ``cause`` whose text is what the caller reads (the fastmcp
    ``Client`` raises on an ``isError`` result by design)."""

    def __init__(self, text: str, cause: BaseException) -> None:
        super().__init__(text)
        self.text, self.cause = text, cause


def described(exc: BaseException) -> str:
    """``Type: text`` of an exception; an exception group is described by its leaves."""
    if isinstance(exc, BaseExceptionGroup):
        leaves = "; ".join(described(inner) for inner in exc.exceptions)
        return f"{type(exc).__name__}: {exc} [{leaves}]"
    return f"{type(exc).__name__}: {exc}"


def text_of(value: Any) -> str:
    """A tool result as text: strings as they are, anything else as JSON (what a framework
    that serialises a structure hands the model)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str, ensure_ascii=False)


async def _one(call: Call, url: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    try:
        async with asyncio.timeout(CALL_TIMEOUT_S):
            read = await call(url, tool, arguments)
    except RaisedReading as exc:
        return {"model_read": exc.text, "raised": described(exc.cause)}
    except Exception as exc:  # every way a run ends is recorded, not raised
        traceback.print_exc(file=sys.stderr)
        return {"model_read": "", "raised": described(exc)}
    return {"model_read": read, "raised": None}


def main(call: Call) -> None:
    """Run ``call`` for each (tool, arguments) on the command line; one JSON line each."""
    url, rest = sys.argv[1], sys.argv[2:]
    pairs = [(rest[i], json.loads(rest[i + 1])) for i in range(0, len(rest), 2)]
    for tool, arguments in pairs:
        result = asyncio.run(_one(call, url, tool, arguments))
        print(json.dumps(result), flush=True)
