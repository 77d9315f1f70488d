"""An API that fails as a test scripts it, for the retry tests (issue 41).

``python -m tests.runtime.retry_upstream PORT`` serves, on aiohttp:

- ``POST /_script {"path": "/x", "fail": N, "with": WHAT, "delay_ms": D}``: the first ``N``
  requests of ``/x`` (any method) fail with ``WHAT``, the ones after are answered 200
  ``{"ok": true, "method": ..., "path": ...}`` (header ``X-Upstream: retry-upstream``); every
  answer, failed or not, waits ``D`` ms first. ``WHAT`` is a status (``"503"``, ``"429"``,
  ``"502"``...), a status with a stated wait in seconds (``"429-after:0.2"``: ``Retry-After-Ms``
  and ``Retry-After``; ``"503-after:30"``; ``"429-reset:1"``: ``RateLimit-Reset``;
  ``"429-body:0.3"``: ``retry_after_ms`` in its JSON body), ``"reset"`` (the whole request
  read, then the connection aborted with no answer), ``"hang"`` (the request read, then no
  answer for 30 s) or ``"cut"`` (a 200 head promising 1000 bytes, 100 of them, then the
  connection aborted).
  ``"answers": [WHAT, ...]`` in place of ``fail`` and ``with`` scripts each request in turn
  (``"200"`` for a success). Scripting a path forgets what it saw.
- ``GET /_hits?path=/x``: ``{"hits": [...]}``, every request of ``/x`` in arrival order:
  ``method``, ``idempotency_key``, ``body`` (text), ``seq`` (the ``X-Test-Seq`` header),
  ``t0`` and ``t1`` (this process's monotonic seconds when its body had been read and when it
  was answered; ``t1`` null until then) and ``answer`` (what it got: ``"200"``, ``"503"``, ...).
- a request with ``Upgrade: websocket`` whose turn is a success: a WebSocket that echoes.

An unscripted path is answered 200 at once. ``script``, ``hits`` and ``counter`` are the tests'
side: scripting it, reading what it saw, and reading mend's counters.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from aiohttp import WSMsgType, web
from prometheus_client.parser import text_string_to_metric_families

from tests.hostile.procs import MendProcess

#: seconds a hung request waits before it is answered after all (mend gives up long before)
HANG_S = 30.0


@dataclass
class Script:
    #: what the first requests get, in turn; the ones after get a 200
    answers: list[str] = field(default_factory=list)
    delay_ms: int = 0
    hits: list[dict[str, Any]] = field(default_factory=list)


SCRIPTS: dict[str, Script] = {}


async def take_script(request: web.Request) -> web.Response:
    order = await request.json()
    answers = order.get("answers") or [str(order.get("with", "503"))] * int(order.get("fail", 0))
    SCRIPTS[order["path"]] = Script([str(a) for a in answers], int(order.get("delay_ms", 0)))
    return web.json_response({"scripted": order["path"]})


async def show_hits(request: web.Request) -> web.Response:
    found = SCRIPTS.get(request.query["path"])
    return web.json_response({"hits": found.hits if found is not None else []})


def _failure(kind: str) -> web.Response:
    """A status answer: ``"503"``; or with the wait it states, in seconds: ``"429-after:0.2"``
    (``Retry-After-Ms`` and ``Retry-After``), ``"429-reset:1"`` (``RateLimit-Reset``),
    ``"429-body:0.3"`` (``retry_after_ms`` in the JSON body)."""
    status, _, stated = kind.partition("-")
    how, _, wait = stated.partition(":")
    headers: dict[str, str] = {}
    error: dict[str, Any] = {"message": "the service is overloaded, come back later"}
    if how == "after":
        headers["Retry-After-Ms"] = str(round(float(wait) * 1000))
        headers["Retry-After"] = str(math.ceil(float(wait)))
    elif how == "reset":
        headers["RateLimit-Reset"] = wait
    elif how == "body":
        error["retry_after_ms"] = round(float(wait) * 1000)
    return web.json_response({"error": error}, status=int(status), headers=headers)


async def echo_socket(request: web.Request) -> web.StreamResponse:
    socket = web.WebSocketResponse()
    await socket.prepare(request)
    async for message in socket:
        if message.type == WSMsgType.TEXT:
            await socket.send_str(message.data)
    return socket


async def scripted(request: web.Request) -> web.StreamResponse:
    found = SCRIPTS.setdefault(request.path, Script())
    body = await request.read()
    hit: dict[str, Any] = {
        "method": request.method,
        "idempotency_key": request.headers.get("Idempotency-Key"),
        "body": body.decode(errors="replace"),
        "seq": request.headers.get("X-Test-Seq"),
        "t0": time.monotonic(),
        "t1": None,
        "answer": None,
    }
    found.hits.append(hit)
    count = len(found.hits)
    kind = found.answers[count - 1] if count <= len(found.answers) else "200"
    try:
        if found.delay_ms:
            await asyncio.sleep(found.delay_ms / 1000)
        if kind == "reset":
            hit["answer"] = "reset"
            assert request.transport is not None
            request.transport.abort()
            raise asyncio.CancelledError  # nothing is written on the aborted connection
        if kind == "hang":
            hit["answer"] = "hang"
            await asyncio.sleep(HANG_S)
            return web.Response(status=504, text="too late")
        if kind == "cut":
            hit["answer"] = "cut"
            response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
            response.content_length = 1000
            await response.prepare(request)
            await response.write(b"x" * 100)
            await asyncio.sleep(0.1)  # the head and the first bytes reach mend, and the agent
            assert request.transport is not None
            request.transport.abort()
            raise asyncio.CancelledError
        if kind != "200":
            hit["answer"] = kind
            return _failure(kind)
        if request.headers.get("Upgrade", "").lower() == "websocket":
            hit["answer"] = "101"
            return await echo_socket(request)
        hit["answer"] = "200"
        answer = {"ok": True, "method": request.method, "path": request.path}
        return web.json_response(answer, headers={"X-Upstream": "retry-upstream"})
    finally:
        hit["t1"] = time.monotonic()


# -- the tests' side ------------------------------------------------------------------------


def script(
    upstream: str,
    path: str,
    fail: int = 0,
    what: str = "503",
    delay_ms: int = 0,
    answers: list[str] | None = None,
) -> None:
    """The upstream fails the first ``fail`` requests of ``path`` with ``what`` (or answers
    each in turn as ``answers`` says), then 200."""
    order = {"path": path, "fail": fail, "with": what, "delay_ms": delay_ms, "answers": answers}
    httpx.post(f"{upstream}/_script", json=order, timeout=5).raise_for_status()


def hits(upstream: str, path: str) -> list[dict[str, Any]]:
    """Every request of ``path`` the upstream saw, in order."""
    answer = httpx.get(f"{upstream}/_hits", params={"path": path}, timeout=5)
    found: list[dict[str, Any]] = answer.json()["hits"]
    return found


def counter(mend: MendProcess, sample: str, **labels: str) -> float:
    """The sum of ``sample``'s values on mend's admin ``/metrics`` whose labels include
    ``labels``."""
    text = httpx.get(f"http://127.0.0.1:{mend.admin_port}/metrics", timeout=5).text
    total = 0.0
    for family in text_string_to_metric_families(text):
        for found in family.samples:
            if found.name == sample and labels.items() <= found.labels.items():
                total += found.value
    return total


def serve(app: web.Application) -> None:
    """``app`` on 127.0.0.1 at the port ``module_server`` gives as the first argument."""
    web.run_app(
        app,
        host="127.0.0.1",
        port=int(sys.argv[1]),
        print=None,
        access_log=None,
        shutdown_timeout=1.0,  # hung requests are not waited for
    )


def main() -> None:
    app = web.Application()
    app.router.add_post("/_script", take_script)
    app.router.add_get("/_hits", show_hits)
    app.router.add_route("*", "/{tail:.*}", scripted)
    serve(app)


if __name__ == "__main__":
    main()
