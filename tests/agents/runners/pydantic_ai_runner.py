"""pydantic-ai: an ``Agent`` on an ``MCPToolset`` with a scripted ``FunctionModel`` (no LLM).

What the model reads is the ``content`` of the ``ToolReturnPart`` (or ``RetryPromptPart``) in
the request the agent sends it after the call.
"""

from __future__ import annotations

from typing import Any

from common import DONE, PROMPT, main, text_of
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel


async def call(url: str, tool: str, arguments: dict[str, Any]) -> str:
    seen: list[ModelMessage] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart(tool, arguments)])
        seen.append(messages[-1])
        return ModelResponse(parts=[TextPart(DONE)])

    agent = Agent(FunctionModel(model), toolsets=[MCPToolset(url)])
    async with agent:
        result = await agent.run(PROMPT)
    assert result.output == DONE
    request = seen[0]
    assert isinstance(request, ModelRequest)
    return "\n".join(text_of(getattr(part, "content", "")) for part in request.parts)


if __name__ == "__main__":
    main(call)
