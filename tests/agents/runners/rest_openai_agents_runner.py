"""openai-agents: an ``Agent`` whose own ``function_tool`` tools call the REST app with
``requests`` (the client its environment holds; ``http_tools``), with the scripted ``Model`` of
``openai_agents_runner`` (no LLM). Tracing is off.

``python rest_openai_agents_runner.py BASE_URL TOOL JSON_ARGUMENTS ...``, the style in
``REST_TOOL_STYLE``. A function tool's exception reaches the model through the default failure
handler, whose fixed line ("An error occurred while running the tool. Please try again.")
says nothing of it; ``RunConfig.tool_error_formatter`` is the SDK's way to add the exception's
text, as its users do. What the model reads is the ``function_call_output`` it gets next.
"""

from __future__ import annotations

from typing import Any

from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled
from agents.run_config import ToolErrorFormatterArgs
from common import DONE, PROMPT, main
from http_tools import style, tools
from openai_agents_runner import Scripted


def with_the_error(args: ToolErrorFormatterArgs[Any]) -> str | None:
    """The SDK's line, then the exception's text."""
    if args.kind != "tool_exception" or args.error is None:
        return None
    return f"{args.default_message} Error: {args.error}"


async def call(url: str, tool: str, arguments: dict[str, Any]) -> str:
    set_tracing_disabled(True)
    model = Scripted(tool, arguments)
    functions = [function_tool(f) for f in tools(url, style(), "requests")]
    agent = Agent(name="shopper", model=model, tools=functions)
    config = RunConfig(tool_error_formatter=with_the_error)
    result = await Runner.run(agent, PROMPT, max_turns=3, run_config=config)
    assert result.final_output == DONE, result.final_output
    return "\n".join(model.read)


if __name__ == "__main__":
    main(call)
