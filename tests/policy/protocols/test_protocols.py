"""The protocol pieces on their own: event-stream rewriting, detection, the request tee."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import make_mocked_request
from multidict import CIMultiDict

from proxy.config.choices import ProtocolName
from proxy.policy.exchange import NOT_JSON
from proxy.policy.protocols.base import Call
from proxy.policy.protocols.detect import Detector, default_protocols
from proxy.policy.protocols.graphql import is_document
from proxy.policy.protocols.jsonrpc import NO_ID, parse_call
from proxy.policy.protocols.sse import Event, EventRewriter, parse_event

ERROR_EVENT = b'event: message\nid: 7\ndata: {"jsonrpc":"2.0","id":1,"error":{}}\n\n'
PROGRESS = b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress"}\n\n'


def rewriter(seen: list[Event] | None = None, cap: int = 1 << 20) -> EventRewriter:
    """Replaces every event holding ``"error"`` with ``data: REWRITTEN``."""

    async def rewrite(event: Event) -> bytes:
        if seen is not None:
            seen.append(event)
        return event.with_data("REWRITTEN")

    return EventRewriter(rewrite, lambda raw: b'"error"' in raw, cap)


async def test_an_event_split_across_chunks_passes_when_complete() -> None:
    """Bytes of an unfinished event wait for its blank line, then go out unchanged."""
    events = rewriter()
    assert await events.feed(PROGRESS[:20]) == b""
    assert await events.feed(PROGRESS[20:-1]) == b""
    assert await events.feed(PROGRESS[-1:]) == PROGRESS


async def test_events_pass_the_moment_they_end() -> None:
    """Two events in one chunk and half of a third: the two go out now."""
    events = rewriter()
    assert await events.feed(PROGRESS + PROGRESS + PROGRESS[:10]) == PROGRESS + PROGRESS


async def test_an_error_event_is_rewritten_keeping_its_other_fields() -> None:
    """The event's ``event:`` and ``id:`` lines stay; its data is replaced."""
    assert await rewriter().feed(ERROR_EVENT) == b"event: message\nid: 7\ndata: REWRITTEN\n\n"


async def test_crlf_events_are_read_and_written_with_crlf() -> None:
    """CRLF line ends end events too, and a rewritten event keeps them."""
    crlf = ERROR_EVENT.replace(b"\n", b"\r\n")
    assert await rewriter().feed(crlf) == b"event: message\r\nid: 7\r\ndata: REWRITTEN\r\n\r\n"


async def test_a_cr_at_the_end_of_a_chunk_waits_for_the_next_byte() -> None:
    """``\\r`` last may be half of ``\\r\\n``: the event is not ended early."""
    events = rewriter()
    crlf = PROGRESS.replace(b"\n", b"\r\n")
    assert await events.feed(crlf[:-1]) == b""
    assert await events.feed(crlf[-1:]) == crlf


async def test_events_without_the_marker_are_never_parsed() -> None:
    """The cheap scan decides: a notification is not parsed or offered for rewriting."""
    seen: list[Event] = []
    events = rewriter(seen)
    await events.feed(PROGRESS * 3)
    assert seen == []


async def test_an_event_over_the_cap_passes_unchanged_as_it_arrives() -> None:
    """An event bigger than the cap is let through as it comes, never held whole."""
    big = b'data: {"error": "' + b"x" * 500 + b'"}\n\n'
    events = rewriter(cap=100)
    out = await events.feed(big[:300])
    assert out == big[:300]
    assert await events.feed(big[300:]) == big[300:]
    assert (await events.feed(ERROR_EVENT)).endswith(b"data: REWRITTEN\n\n")  # the next one is read


async def test_an_unfinished_event_is_flushed_at_the_end() -> None:
    """What is left when the stream ends goes out as it came."""
    events = rewriter()
    await events.feed(PROGRESS[:15])
    assert events.close() == PROGRESS[:15]


def test_multi_line_data_is_joined_as_a_client_reads_it() -> None:
    """``data:`` lines join with newlines; a space after the colon is dropped."""
    event = parse_event(b"event: message\ndata: a\ndata:b\n\n")
    assert (event.event, event.data) == ("message", "a\nb")


def test_an_ordinary_get_gets_no_call() -> None:
    """A GET with no protocol header costs detection two header look-ups and no ``Call``."""
    request = make_mocked_request("GET", "/orders/7")
    assert Detector(default_protocols()).call(request, ProtocolName.AUTO) is None


def test_an_http_route_never_detects() -> None:
    """``protocol: http``: not even an MCP header makes a call."""
    request = make_mocked_request("POST", "/mcp", headers={"Mcp-Session-Id": "s1"})
    assert Detector(default_protocols()).call(request, ProtocolName.HTTP) is None


def test_an_mcp_header_signals_mcp() -> None:
    """``MCP-Protocol-Version`` decides before the body is read."""
    headers = CIMultiDict({"MCP-Protocol-Version": "2025-06-18"})
    request = make_mocked_request("GET", "/mcp", headers=headers)
    call = Detector(default_protocols()).call(request, ProtocolName.AUTO)
    assert call is not None
    assert call.protocol is not None
    assert call.protocol.name is ProtocolName.MCP


def test_the_tee_keeps_at_most_its_cap_and_a_cut_body_does_not_parse() -> None:
    """The side copy never grows past the cap; a body longer than it is not parsed."""
    call = Call("POST", "", "", tee=bytearray(), cap=8)
    call.feed(b'{"jsonrpc":')
    call.feed(b'"2.0"}')
    call.end()
    assert len(call.tee or b"") == 8
    assert call.document() is NOT_JSON


def test_a_body_still_arriving_is_not_decided_against() -> None:
    """Asked before the body ended, the call stays undecided and parses once it has."""
    detector = Detector(default_protocols())
    call = detector.make(method="POST", tee=True)
    call.feed(b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call"}')
    assert detector.resolve(call) is None
    call.end()
    found = detector.resolve(call)
    assert found is not None
    assert found.name is ProtocolName.MCP


def test_a_search_query_is_not_a_graphql_document() -> None:
    """``{"query": "red shoes"}`` is a search, ``{ me { id } }`` and ``query Q`` are GraphQL."""
    assert not is_document("red shoes")
    assert not is_document("queryString")
    assert is_document("{ me { id } }")
    assert is_document("  query Q($id: ID!) { node(id: $id) { id } }")
    assert is_document("mutation{ x }")


def test_jsonrpc_ids_compare_by_type() -> None:
    """A response with id "1" does not answer a request with id 1."""
    call = parse_call({"jsonrpc": "2.0", "id": 1, "method": "m"})
    assert call is not None
    assert call.find(1) is not None
    assert call.find("1") is None


def test_a_request_without_id_is_a_notification() -> None:
    """No ``id`` member is a notification; ``"id": null`` is an id."""
    batch: Any = [{"jsonrpc": "2.0", "method": "a"}, {"jsonrpc": "2.0", "id": None, "method": "b"}]
    call = parse_call(batch)
    assert call is not None
    assert [r.id for r in call.requests] == [NO_ID, None]
