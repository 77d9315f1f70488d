"""llama-index: a ``FunctionAgent`` on ``McpToolSpec`` tools (``BasicMCPClient``, streamable
HTTP) with llama-index's own ``MockFunctionCallingLLM`` answering from a script (no LLM).

The script's first turn selects the tool; what the model reads is the ``tool`` role message on
its second turn (llama-index puts ``str()`` of the tool's output there: for an MCP tool, the
``CallToolResult``'s repr, ``meta`` included, or the exception's text when the call raised).
"""

from __future__ import annotations

from typing import Any

from common import DONE, PROMPT, main
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.llms import ChatMessage, MessageRole
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import ToolSelection
from llama_index.tools.mcp import BasicMCPClient, McpToolSpec


async def call(url: str, tool: str, arguments: dict[str, Any]) -> str:
    read: list[str] = []

    def script(messages: list[ChatMessage], **kwargs: Any) -> ChatMessage:
        replies = [m for m in messages if m.role == MessageRole.TOOL]
        if not replies:
            selection = ToolSelection(tool_id="call_1", tool_name=tool, tool_kwargs=arguments)
            return ChatMessage(
                role=MessageRole.ASSISTANT,
                content="",
                additional_kwargs={"tool_calls": [selection]},
            )
        read.extend(str(m.content) for m in replies)
        return ChatMessage(role=MessageRole.ASSISTANT, content=DONE)

    tools = await McpToolSpec(client=BasicMCPClient(url, timeout=30)).to_tool_list_async()
    llm = MockFunctionCallingLLM(response_generator=script)
    agent = FunctionAgent(tools=tools, llm=llm, streaming=False)
    result = await agent.run(user_msg=PROMPT)
    assert str(result).strip() == DONE, str(result)
    return "\n".join(read)


if __name__ == "__main__":
    main(call)
