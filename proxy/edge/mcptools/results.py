"""What the proxy answered a tool's request, as the tool's result (docs/contract.md §9).

A success: ``isError: false``, ``structuredContent`` the JSON body (an object; anything else as
``{"result": ...}``, as the tool's ``outputSchema`` says) and a text content with the body. A
failure: ``isError: true``, the text content the recovery plan the tool layers read (the
envelope's text rendering, as an MCP upstream's rewritten error, ``proxy/policy/protocols/mcp.py``),
the envelope in ``_meta["mend/error"]``, and in ``structuredContent`` too as ``{"error": ...}``
where the tool has no ``outputSchema`` (one that has must only see documents of its own shape).
Every pointer of the envelope names the tool's argument, not the HTTP request's part, and its
prose names tools, not requests: the request line (``POST /items``) becomes the tool's name, and a
``next_operation`` the document has a tool for becomes that tool's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcp_types import CallToolResult, TextContent

from proxy.config.choices import Rendering
from proxy.edge.mcptools.internal import Answer
from proxy.edge.mcptools.tools import RESULT, Toolbox, ToolSpec
from proxy.policy.envelope.model import Envelope, InvalidField
from proxy.policy.envelope.pointer import escape_segment
from proxy.policy.exchange import NOT_JSON
from proxy.policy.openapi.spec import Mount, Spec
from proxy.policy.protocols.mcp import META_KEY
from proxy.policy.render.render import render
from proxy.policy.upstream_body import Body
from proxy.policy.upstream_body import parse as parse_body

#: Bytes a compressed answer may grow to when decoded (the rest is cut, and said to be).
MAX_DECODED = 8 << 20


def tool_result(
    tool: ToolSpec | None,
    answer: Answer,
    name: str,
    context: ToolContext | None = None,
    line: str = "",
) -> CallToolResult:
    """The result of calling tool ``name`` (``tool`` ``None``: there is no such tool); ``line``
    is the request the call made (``GET /items/9``), ``context`` the tools beside it."""
    if answer.envelope is not None:
        envelope = answer.envelope
        if tool is not None:
            envelope = in_tool_terms(pointed(tool, envelope), tool, context, line)
        return failure(envelope, name, has_output=bool(tool and tool.definition.output_schema))
    body = _read(answer)
    text = body.text
    if body.truncated:
        text += f"\n[the answer is longer than the {len(answer.body)} bytes kept; cut here]"
    document = body.json
    content = [TextContent(type="text", text=text)]
    if document is NOT_JSON:
        return CallToolResult(content=content, is_error=answer.status >= 400)
    wrap = (tool is not None and tool.wrapped_output) or not isinstance(document, dict)
    structured = {RESULT: document} if wrap else document
    return CallToolResult(content=content, structured_content=structured, is_error=False)


def _read(answer: Answer) -> Body:
    """The answer's body decoded as the proxy reads an error body
    (``proxy/policy/upstream_body.py``): its
    content encoding undone (capped), its charset honoured, JSON parsed when it is whole."""
    content_type = answer.headers.get("Content-Type", "")
    charset = content_type.partition("charset=")[2].split(";", 1)[0].strip(' "') or None
    return parse_body(
        answer.body,
        encoding=answer.headers.get("Content-Encoding", ""),
        charset=charset,
        limit=MAX_DECODED,
        cut=answer.over,
    )


def failure(envelope: Envelope, name: str, *, has_output: bool) -> CallToolResult:
    """A failed call: the plan as text, the envelope in ``_meta`` (and ``structuredContent``
    where the tool's output schema allows it)."""
    data = envelope.as_dict()
    status = envelope.upstream_status or 200
    text = render(envelope, Rendering.TEXT, status, tool=name)[0].decode("utf-8")
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=None if has_output else {"error": data},
        is_error=True,
        _meta={META_KEY: data},
    )


def pointed(tool: ToolSpec, envelope: Envelope) -> Envelope:
    """The envelope with its pointers into the tool's arguments."""
    fields = tuple(_field(tool, f) for f in envelope.invalid_fields)
    update: dict[str, Any] = {"invalid_fields": fields}
    if envelope.field is not None:
        location = next(
            (f.location for f in envelope.invalid_fields if f.field == envelope.field), None
        )
        update["field"] = argument_pointer(tool, envelope.field, location)
    return envelope.model_copy(update=update)


def in_tool_terms(
    envelope: Envelope, tool: ToolSpec, context: ToolContext | None, line: str
) -> Envelope:
    """The envelope's prose with the tool's name for the request it made, and its
    ``next_operation`` a tool's name when the document has a tool for it."""

    def said(text: str) -> str:
        if not line or line not in text:
            return text
        text = text.replace(f"Send {line} again", f"Call {tool.name} again")
        return text.replace(line, f"the tool {tool.name}")

    update: dict[str, Any] = {
        "message": said(envelope.message),
        "hint": said(envelope.hint),
        "steps": tuple(said(step) for step in envelope.steps),
    }
    if envelope.next_operation and context is not None:
        update.update(next_tool(envelope, context))
    return envelope.model_copy(update=update)


@dataclass(frozen=True, slots=True)
class ToolContext:
    """The tools beside the one called: the route's document, where it is mounted."""

    tools: Toolbox
    spec: Spec
    mount: Mount


def next_tool(envelope: Envelope, context: ToolContext) -> dict[str, Any]:
    """``next_operation`` (``POST /orders/17/confirm``, or a template) as the tool that calls it
    and its arguments (path values read off the path, then ``next_operation_args``); ``{}``
    when no tool does."""
    method, _, path = (envelope.next_operation or "").partition(" ")
    located = context.spec.locate(method, path.split("?", 1)[0], context.mount)
    match = located.match if located is not None else None
    if match is None or match.operation is None:
        return {}
    operation = match.operation
    tool = next(
        (t for t in context.tools.tools if t.operation is operation),
        None,
    )
    if tool is None:
        return {}
    arguments: dict[str, Any] = {}
    for key, value in match.params.items():
        argument = tool.argument("path", key)
        if argument is not None and not value.startswith("{"):  # a template's own {name}
            arguments[argument.name] = _typed(value)
    for key, value in (envelope.next_operation_args or {}).items():
        argument = tool.named(key) or tool.argument("path", key) or tool.argument("query", key)
        arguments[argument.name if argument is not None else key] = value
    return {"next_operation": tool.name, "next_operation_args": arguments or None}


def _typed(text: str) -> Any:
    """A path value as the model would write it: digits as a number."""
    return int(text) if text.isdigit() and len(text) < 16 else text


def _field(tool: ToolSpec, item: InvalidField) -> InvalidField:
    return item.model_copy(update={"field": argument_pointer(tool, item.field, item.location)})


def argument_pointer(tool: ToolSpec, pointer: str, location: str | None) -> str:
    """The JSON Pointer into the arguments for ``pointer`` into the request's ``location``
    (path, query, header: the parameter's name; body, or unknown: into the body)."""
    head, _, rest = pointer.lstrip("/").partition("/")
    head = head.replace("~1", "/").replace("~0", "~")
    tail = "/" + rest if rest else ""
    if location in ("path", "query", "header"):
        argument = tool.argument(location, head)
        return "/" + escape_segment(argument.name) + tail if argument is not None else pointer
    if tool.whole_body and location in ("body", None):
        whole = tool.argument("body", "")
        if whole is not None and (location == "body" or tool.named(head) is None):
            return "/" + escape_segment(whole.name) + pointer if pointer else "/" + whole.name
    if location in ("body", None) and head:
        argument = tool.argument("body", head)
        if argument is not None:
            return "/" + escape_segment(argument.name) + tail
    return pointer
