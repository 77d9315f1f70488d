"""langchain-mcp-adapters with langgraph's ``ToolNode`` (its defaults) in a graph whose model node
is scripted (no LLM): its first ``AIMessage`` holds one ``tool_calls`` entry, routed to the tools
by ``tools_condition``; its second turn answers "done".

What the model reads is the ``ToolMessage`` it finds on its second turn: its ``content`` (a
string or a list of content blocks). The adapter turns an ``isError`` result into a
``ToolException`` the tool answers with; a JSON-RPC error is an ``McpError`` that ``ToolNode``'s
default error handling does not catch, so it ends the run.
"""

from __future__ import annotations

from typing import Any

from common import DONE, PROMPT, main, text_of
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_mcp_adapters.client import MultiServerMCPClient
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition


def content_text(content: Any) -> str:
    if isinstance(content, list):
        parts = [c.get("text", text_of(c)) if isinstance(c, dict) else text_of(c) for c in content]
        return "\n".join(str(p) for p in parts)
    return text_of(content)


async def call(url: str, tool: str, arguments: dict[str, Any]) -> str:
    client = MultiServerMCPClient({"shop": {"url": url, "transport": "streamable_http"}})
    tools = await client.get_tools()
    read: list[str] = []

    def model(state: MessagesState) -> dict[str, list[AIMessage]]:
        replies = [m for m in state["messages"] if isinstance(m, ToolMessage)]
        if not replies:
            call = {"name": tool, "args": arguments, "id": "call_1", "type": "tool_call"}
            return {"messages": [AIMessage(content="", tool_calls=[call])]}
        read.extend(content_text(m.content) for m in replies)
        return {"messages": [AIMessage(content=DONE)]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "model")
    state = await graph.compile().ainvoke({"messages": [HumanMessage(PROMPT)]})
    assert state["messages"][-1].content == DONE
    return "\n".join(read)


if __name__ == "__main__":
    main(call)
