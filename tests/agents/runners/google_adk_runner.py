"""google-adk: an ``LlmAgent`` on ``McpToolset`` (streamable HTTP) with a scripted ``BaseLlm``
(no LLM), run by an ``InMemoryRunner``.

The model's first turn is a ``function_call`` of the tool; what it reads is the
``function_response.response`` in the contents of its second turn, serialised as JSON (ADK hands
the model the whole ``CallToolResult`` dump, ``_meta`` included).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

from common import DONE, PROMPT, main
from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.adk.tools.mcp_tool import McpToolset, StreamableHTTPConnectionParams
from google.genai import types

READ: list[str] = []


class Scripted(BaseLlm):
    """Calls ``tool`` with ``arguments`` (kept in the model name's place: ``tool json``), then
    answers DONE; keeps what it read in ``READ``."""

    tool: str
    arguments: dict[str, Any]

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        responses = [
            part.function_response
            for content in llm_request.contents
            for part in content.parts or []
            if part.function_response is not None
        ]
        if not responses:
            call = types.FunctionCall(id="call_1", name=self.tool, args=self.arguments)
            part = types.Part(function_call=call)
        else:
            READ.extend(json.dumps(r.response, default=str) for r in responses)
            part = types.Part(text=DONE)
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


async def call(url: str, tool: str, arguments: dict[str, Any]) -> str:
    READ.clear()
    toolset = McpToolset(connection_params=StreamableHTTPConnectionParams(url=url, timeout=30))
    model = Scripted(model="scripted", tool=tool, arguments=arguments)
    agent = LlmAgent(name="shopper", model=model, tools=[toolset])
    runner = InMemoryRunner(agent=agent, app_name="shop")
    session = await runner.session_service.create_session(app_name="shop", user_id="u")
    message = types.Content(role="user", parts=[types.Part(text=PROMPT)])
    final = ""
    try:
        async for event in runner.run_async(
            user_id="u", session_id=session.id, new_message=message
        ):
            for part in (event.content.parts if event.content else None) or []:
                if part.text:
                    final = part.text
    finally:
        await toolset.close()
    assert final == DONE, final
    return "\n".join(READ)


if __name__ == "__main__":
    main(call)
