"""pydantic-ai: an ``Agent`` whose own function tools (``tools=``) call the REST app with
``httpx`` (``http_tools``), with a scripted ``FunctionModel`` (no LLM).

``python rest_pydantic_ai_runner.py BASE_URL TOOL JSON_ARGUMENTS ...``, the style in
``REST_TOOL_STYLE``. pydantic-ai hands the model a tool's exception only as ``ModelRetry``
(any other ends the run), so the ``raise`` style's tools do what its users write:
``except httpx.HTTPStatusError as e: raise ModelRetry(str(e))``. What the model reads is the
``content`` of the ``ToolReturnPart`` (or ``RetryPromptPart``) in the request after the call.
"""

from __future__ import annotations

from typing import Any, NoReturn

from common import DONE, PROMPT, main, text_of
from http_tools import style, tools
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel


def retry(exc: Exception) -> NoReturn:
    raise ModelRetry(str(exc)) from exc


async def call(url: str, tool: str, arguments: dict[str, Any]) -> str:
    seen: list[ModelMessage] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart(tool, arguments)])
        seen.append(messages[-1])
        return ModelResponse(parts=[TextPart(DONE)])

    agent = Agent(FunctionModel(model), tools=tools(url, style(), "httpx", retry))
    result = await agent.run(PROMPT)
    assert result.output == DONE
    request = seen[0]
    assert isinstance(request, ModelRequest)
    return "\n".join(text_of(getattr(part, "content", "")) for part in request.parts)


if __name__ == "__main__":
    main(call)
