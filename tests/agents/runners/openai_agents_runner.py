"""openai-agents: an ``Agent`` on ``MCPServerStreamableHttp`` with a scripted ``Model`` (no LLM).

The model's first turn is a ``function_call`` of the tool; what it reads is the ``output`` of the
``function_call_output`` item in the input of its second turn. Tracing is off (it would export to
OpenAI).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, Model, ModelResponse, Runner, Usage, set_tracing_disabled
from agents.mcp import MCPServerStreamableHttp
from common import DONE, PROMPT, main, text_of
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)


def output_text(output: Any) -> str:
    """A function_call_output's ``output``: a string, or a list of content items."""
    if isinstance(output, list):
        return "\n".join(str(item.get("text", text_of(item))) for item in output)
    if isinstance(output, dict):
        return str(output.get("text", text_of(output)))
    return text_of(output)


class Scripted(Model):
    """Calls ``tool`` with ``arguments``, then answers DONE; keeps what it read."""

    def __init__(self, tool: str, arguments: dict[str, Any]) -> None:
        self.tool, self.arguments = tool, arguments
        self.read: list[str] = []

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = [] if isinstance(input, str) else list(input)
        outputs = [
            i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        if not outputs:
            call = ResponseFunctionToolCall(
                type="function_call",
                id="fc_1",
                call_id="call_1",
                name=self.tool,
                arguments=json.dumps(self.arguments),
                status="completed",
            )
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        self.read.extend(output_text(o.get("output")) for o in outputs)
        text = ResponseOutputText(type="output_text", text=DONE, annotations=[])
        message = ResponseOutputMessage(
            type="message", id="msg_1", role="assistant", status="completed", content=[text]
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


async def call(url: str, tool: str, arguments: dict[str, Any]) -> str:
    set_tracing_disabled(True)
    model = Scripted(tool, arguments)
    async with MCPServerStreamableHttp(params={"url": url, "timeout": 30}, name="shop") as server:
        agent = Agent(name="shopper", model=model, mcp_servers=[server])
        result = await Runner.run(agent, PROMPT, max_turns=3)
    assert result.final_output == DONE, result.final_output
    return "\n".join(model.read)


if __name__ == "__main__":
    main(call)
