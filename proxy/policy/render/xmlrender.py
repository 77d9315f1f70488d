"""The ``xml`` rendering: ``<tool_error>``, every upstream-derived text escaped."""

from __future__ import annotations

import re
from typing import Any

from proxy.policy.envelope.model import Envelope
from proxy.policy.render.jsontext import json_text, unsurrogate

_XML_ILLEGAL = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_XML_TEXT = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "\r": "&#13;"})
_XML_ATTR = str.maketrans(
    {
        "&": "&amp;",
        "<": "&lt;",
        ">": "&gt;",
        '"': "&quot;",
        "\r": "&#13;",
        "\n": "&#10;",
        "\t": "&#9;",
    }
)


def _xt(text: str) -> str:
    return _XML_ILLEGAL.sub("", unsurrogate(text)).translate(_XML_TEXT)


def _xa(text: str) -> str:
    return '"' + _XML_ILLEGAL.sub("", unsurrogate(text)).translate(_XML_ATTR) + '"'


def _xv(value: Any) -> str:
    """Values (received, allowed, suggested, args) are JSON text, so their type survives."""
    return _xt(json_text(value))


def _available_actions(envelope: Envelope) -> list[str]:
    actions = [envelope.action.value]
    if envelope.next_operation and envelope.next_operation not in actions:
        actions.append(envelope.next_operation)
    return actions


def _fields(envelope: Envelope, data: dict[str, Any]) -> list[str]:
    """``<field>`` for the main field when no invalid field names it, then one per invalid field."""
    out = []
    if envelope.field is not None and all(
        item.field != envelope.field for item in envelope.invalid_fields
    ):
        out.append(f"  <field pointer={_xa(envelope.field)}/>")
    for item in data["invalid_fields"]:
        out.append(f"  <field pointer={_xa(item['field'])}>")
        out.append(f"    <reason>{_xt(item['reason'])}</reason>")
        if item["received"] is not None:
            out.append(f"    <received>{_xv(item['received'])}</received>")
        if item["allowed_values"] is not None:
            out.append(f"    <allowed_values>{_xv(item['allowed_values'])}</allowed_values>")
        out.append("  </field>")
    return out


def render_xml(envelope: Envelope) -> bytes:
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f"<tool_error code={_xa(envelope.code)} severity={_xa(envelope.severity.value)}>",
        f"  <message>{_xt(envelope.message)}</message>",
        f"  <category>{_xt(envelope.category.value)}</category>",
        f"  <retryable>{'true' if envelope.retryable else 'false'}</retryable>",
    ]
    if envelope.retry_after_ms is not None:
        out.append(f"  <retry_after_ms>{envelope.retry_after_ms}</retry_after_ms>")
    if envelope.applied is not None:
        out.append(f"  <applied>{_xt(envelope.applied)}</applied>")
    out.append(f"  <action>{_xt(envelope.action.value)}</action>")
    out.append("  <recovery>")
    out.append(f"    <hint>{_xt(envelope.hint)}</hint>")
    out.extend(f'    <step n="{n}">{_xt(step)}</step>' for n, step in enumerate(envelope.steps, 1))
    out.append("  </recovery>")
    out.append("  <available_actions>")
    out.extend(f"    <action>{_xt(a)}</action>" for a in _available_actions(envelope))
    out.append("  </available_actions>")
    # Values come from the JSON-mode dump so that the XML says exactly what the JSON says.
    data = envelope.as_dict()
    out.extend(_fields(envelope, data))
    if data["allowed_values"] is not None:
        out.append(f"  <allowed_values>{_xv(data['allowed_values'])}</allowed_values>")
    if data["suggested_value"] is not None:
        out.append(f"  <suggested_value>{_xv(data['suggested_value'])}</suggested_value>")
    if envelope.next_operation is not None:
        out.append("  <next_operation>")
        out.append(f"    <operation>{_xt(envelope.next_operation)}</operation>")
        for name, arg in (data["next_operation_args"] or {}).items():
            out.append(f"    <arg name={_xa(str(name))}>{_xv(arg)}</arg>")
        out.append("  </next_operation>")
    if envelope.related_codes:
        out.append("  <related_codes>")
        out.extend(f"    <code>{_xt(c)}</code>" for c in envelope.related_codes)
        out.append("  </related_codes>")
    if envelope.docs_url is not None:
        out.append(f"  <docs_url>{_xt(envelope.docs_url)}</docs_url>")
    out.append(f"  <request_id>{_xt(envelope.request_id)}</request_id>")
    if envelope.upstream_status is not None:
        out.append(f"  <upstream_status>{envelope.upstream_status}</upstream_status>")
    out.append(f"  <rule>{_xt(envelope.rule)}</rule>")
    out.append("</tool_error>")
    # _xt/_xa mapped every surrogate, so strict UTF-8 cannot fail here.
    return ("\n".join(out) + "\n").encode("utf-8")
