"""langgraph: a ``ToolNode`` of langchain ``@tool`` functions that call the REST app with
``httpx`` (``http_tools``), in a graph whose model node is scripted (no LLM) as in
``langgraph_runner``.

``python rest_langgraph_runner.py BASE_URL TOOL JSON_ARGUMENTS ...``, the style in
``REST_TOOL_STYLE``. ``ToolNode``'s default error handling re-raises a tool's exception (the run
ends on it); ``handle_tool_errors=True`` is its way to hand the model the exception's text
(``Error: HTTPStatusError(...)``), as its users set it. What the model reads is the
``ToolMessage`` it finds on its second turn.
"""

from __future__ import annotations

from typing import Any

from common import DONE, PROMPT, main
from http_tools import style, tools
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool as as_tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph_runner import content_text


async def call(url: str, tool: str, arguments: dict[str, Any]) -> str:
    functions = [as_tool(f) for f in tools(url, style(), "httpx")]
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
    graph.add_node("tools", ToolNode(functions, handle_tool_errors=True))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "model")
    state = await graph.compile().ainvoke({"messages": [HumanMessage(PROMPT)]})
    assert state["messages"][-1].content == DONE
    return "\n".join(read)


if __name__ == "__main__":
    main(call)
