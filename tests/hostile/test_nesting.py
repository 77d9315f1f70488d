"""Deeply nested JSON is an ordinary input: bodies nested past any sane depth, end to end.

A real mend in front of a real aiohttp upstream. Whatever the depth (400 is under orjson's own
limit of 1024, 100,000 far over it), the agent gets the upstream's status with an envelope, and
mend never reports a bug of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web

from proxy.policy.exchange import NOT_JSON
from proxy.policy.json_depth import MAX_JSON_DEPTH, exceeds_depth, loads
from proxy.policy.upstream_body import parse
from tests.conftest import StartMend, StartUpstream

DEPTHS = (400, 1_000, 100_000)
FALLBACK_CODES = {500: "INTERNAL_ERROR", 422: "VALIDATION_FAILED", 400: "BAD_REQUEST"}


def nested_array(depth: int) -> str:
    return "[" * depth + "]" * depth


def nested_object(depth: int, key: str = "a") -> str:
    return f'{{"{key}":' * depth + "1" + "}" * depth


#: Shapes the rewrite descends into, each along another recursive path: the "error" key the
#: upstream-message search follows; a FastAPI field location made a pointer; a DRF-style object
#: of field errors that is flattened. Before the depth limit each failed on a 400.
DESCENDED: dict[str, Callable[[int], str]] = {
    "error_object": lambda depth: nested_object(depth, "error"),
    "fastapi_loc": lambda depth: (
        '{"detail":[{"loc":' + nested_array(depth - 3) + ',"msg":"bad","input":1}]}'
    ),
    "drf_fields": lambda depth: '{"errors":' + nested_object(depth - 1, "field") + "}",
}


async def _answer(
    start_upstream: StartUpstream, start_mend: StartMend, status: int, body: str
) -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
    """What an agent gets when the upstream answers ``status`` with ``body``, and mend's log."""

    async def failing(_: web.Request) -> web.Response:
        return web.Response(status=status, text=body, content_type="application/json")

    mend = await start_mend(await start_upstream({"/deep": failing}))
    resp = await mend.client.post("/deep", json={})
    return resp.status, (await resp.json())["error"], mend.log_lines()


@pytest.mark.parametrize("status", sorted(FALLBACK_CODES))
@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("nest", [nested_array, nested_object], ids=["array", "object"])
async def test_deeply_nested_error_body_gets_the_upstreams_envelope(
    start_upstream: StartUpstream,
    start_mend: StartMend,
    status: int,
    depth: int,
    nest: Callable[[int], str],
) -> None:
    """The upstream's status and its fallback envelope, never PROXY_INTERNAL_ERROR or mend_bug."""
    got, error, log = await _answer(start_upstream, start_mend, status, nest(depth))
    assert got == status
    assert (error["code"], error["upstream_status"]) == (FALLBACK_CODES[status], status)
    assert not any(line["event"] == "mend_bug" for line in log)


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("shape", sorted(DESCENDED))
async def test_deep_values_where_rules_look_still_get_the_envelope(
    start_upstream: StartUpstream, start_mend: StartMend, depth: int, shape: str
) -> None:
    """Nesting under the keys rules and message search read is text too: a 400, BAD_REQUEST."""
    got, error, log = await _answer(start_upstream, start_mend, 400, DESCENDED[shape](depth))
    assert got == 400
    assert (error["code"], error["upstream_status"]) == ("BAD_REQUEST", 400)
    assert not any(line["event"] == "mend_bug" for line in log)


async def test_a_deeply_nested_request_body_reaches_the_upstream_untouched(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """mend never parses what an agent sends: 100,000 levels arrive byte for byte."""
    sent = nested_array(100_000).encode()
    received: list[bytes] = []

    async def echo(request: web.Request) -> web.Response:
        received.append(await request.read())
        return web.json_response({"ok": True})

    mend = await start_mend(await start_upstream({"/deep": echo}))
    resp = await mend.client.post("/deep", data=sent, headers={"Content-Type": "application/json"})
    assert resp.status == 200
    assert received == [sent]


@pytest.mark.parametrize(
    "text",
    [
        "[" * (1 << 20),
        "{" * (1 << 20),
        '{"a":' * 200_000,
        '"' + '\\"' * 200_000,
        "[" * 63 + '"' + "[" * 100_000,
    ],
    ids=["open_arrays", "open_braces", "open_objects", "escaped_quotes", "brackets_in_string"],
)
async def test_megabytes_of_unclosed_brackets_in_a_text_body_are_fine(
    start_upstream: StartUpstream, start_mend: StartMend, text: str
) -> None:
    """A text body of a megabyte of openers is text, and gets the 500 envelope like any other."""

    async def failing(_: web.Request) -> web.Response:
        return web.Response(status=500, text=text, content_type="text/plain")

    mend = await start_mend(await start_upstream({"/deep": failing}))
    resp = await mend.client.get("/deep")
    assert resp.status == 500
    assert (await resp.json())["error"]["code"] == "INTERNAL_ERROR"
    assert not any(line["event"] == "mend_bug" for line in mend.log_lines())


async def test_a_json_string_full_of_brackets_is_scrubbed_as_text(
    start_upstream: StartUpstream, start_mend: StartMend
) -> None:
    """A field error whose reason is 2,000 ``[``: the envelope, not mend's own failure."""
    reason = "[" * 2_000

    async def failing(_: web.Request) -> web.Response:
        body = {"detail": [{"loc": ["body", "qty"], "msg": reason, "input": 1}]}
        return web.json_response(body, status=422)

    mend = await start_mend(await start_upstream({"/deep": failing}))
    resp = await mend.client.post("/deep", json={})
    assert resp.status == 422
    assert (await resp.json())["error"]["code"] == "VALIDATION_FAILED"


@pytest.mark.parametrize("depth", [1, 2, 3, MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH])
def test_documents_up_to_the_limit_are_parsed(depth: int) -> None:
    """Arrays, objects and a mix of both, nested exactly up to the limit, are JSON."""
    for text in (nested_array(depth), nested_object(depth), _mixed(depth)):
        assert not exceeds_depth(text)
        assert loads(text.encode()) is not NOT_JSON


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, MAX_JSON_DEPTH + 2, 1_000, 100_000])
def test_documents_past_the_limit_are_text(depth: int) -> None:
    """One level past the limit is enough to be read as text, however it nests."""
    for text in (nested_array(depth), nested_object(depth), _mixed(depth)):
        assert exceeds_depth(text)
        assert loads(text) is NOT_JSON


def _mixed(depth: int) -> str:
    """Arrays and objects alternating, ``depth`` deep, beside strings of brackets and escapes."""
    opened = "".join('{"k\\"[{":' if n % 2 else '["[{\\\\", "]]\\"", ' for n in range(depth))
    closed = "".join("}" if n % 2 else "]" for n in reversed(range(depth)))
    return opened + "1" + closed


def test_brackets_inside_strings_do_not_count() -> None:
    """A shallow document whose strings hold thousands of brackets is JSON."""
    text = '{"message": "' + "[{" * 5_000 + '\\\\", "more": ["\\"]]]]"]}'
    assert not exceeds_depth(text)
    assert loads(text) == {"message": "[{" * 5_000 + "\\", "more": ['"]]]]']}


def test_many_shallow_containers_are_one_deep_document_only_when_they_nest() -> None:
    """100,000 sibling arrays two deep are JSON; the count of brackets alone decides nothing."""
    text = "[" + ",".join(["[[]]"] * 100_000) + "]"
    assert not exceeds_depth(text)
    assert loads(text) is not NOT_JSON


def test_a_deep_body_parsed_from_another_charset_is_text() -> None:
    """The limit holds for bodies decoded from a declared charset as well as for UTF-8."""
    body = parse(
        nested_object(1_000).encode("utf-16"),
        encoding="",
        charset="utf-16",
        limit=1 << 20,
        cut=False,
    )
    assert body.json is NOT_JSON
    assert body.text.startswith('{"a":')


def test_a_megabyte_of_openers_is_decided_at_once() -> None:
    """The depth check stops at the first bracket past the limit: 1 MB of ``[`` is no work."""
    started = time.perf_counter()
    assert exceeds_depth(b"[" * (1 << 20))
    assert time.perf_counter() - started < 0.5
