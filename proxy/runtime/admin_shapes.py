"""The admin port's view of what only a fallback explained: ``GET /shapes``, ``GET /suggest``.

``/shapes`` lists the unexplained shapes (``proxy/observation/shapes.py``) with their counts and
masked samples; ``/suggest`` the rule and cases proposed for each (``proxy/runtime/proposals.py``),
``?rule_id=`` for one. They show upstream answers, masked but the operator's to read: with an
admin token set they need it, as mutating endpoints do.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from pathlib import Path

import orjson
from aiohttp import web

from proxy.observation.shapes import Seen, ShapeLimits, merge
from proxy.policy.ruleengine import FALLBACKS
from proxy.policy.rulefile import load_rule_text
from proxy.runtime.proposals import Proposal, propose

#: the shapes now: this process's book, or the workers' files merged
Shapes = Callable[[], list[Seen]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def fallback_codes() -> dict[str, tuple[str, str]]:
    """Each built-in fallback's code and category, by rule id (read from the file the engine
    reads them from: the supervisor of ``--workers`` holds no engine)."""
    text = FALLBACKS.read_text(encoding="utf-8")
    loaded = load_rule_text(text, str(FALLBACKS), default_pack=FALLBACKS.stem)
    return {r.spec.id: (r.spec.envelope.code, r.spec.envelope.category.value) for r in loaded}


def proposals(shapes: list[Seen], codes: dict[str, tuple[str, str]]) -> list[Proposal]:
    return [propose(seen, codes) for seen in shapes]


def from_workers(directory: Path, limits: ShapeLimits) -> Shapes:
    """The shapes every worker wrote into ``directory`` (``shapes-<pid>.json``), merged."""

    def read() -> list[Seen]:
        books = []
        for file in sorted(directory.glob("shapes-*.json")):
            try:
                books.append(orjson.loads(file.read_bytes()))
            except (OSError, orjson.JSONDecodeError):
                continue  # a worker that is gone, or a file being replaced
        return merge(books, limits)

    return read


def _private(token: str | None, handler: Handler) -> Handler:
    """``handler`` behind ``Authorization: Bearer <token>`` when a token is set."""
    if token is None:
        return handler
    expected = f"Bearer {token}".encode()

    async def guarded(request: web.Request) -> web.StreamResponse:
        given = request.headers.get("Authorization", "").encode("utf-8", "replace")
        if not hmac.compare_digest(given, expected):
            return web.json_response(
                {"status": "unauthorized", "detail": "send Authorization: Bearer <admin token>"},
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="mend admin"'},
            )
        return await handler(request)

    return guarded


def add_shape_routes(app: web.Application, shapes: Shapes, token: str | None) -> None:
    """``GET /shapes`` and ``GET /suggest`` on the admin ``app``."""
    codes = fallback_codes()

    async def listing(_: web.Request) -> web.Response:
        body = {"shapes": [seen.as_dict() for seen in shapes()]}
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    async def suggest(request: web.Request) -> web.Response:
        wanted = request.query.get("rule_id")
        found = [p.as_dict() for p in proposals(shapes(), codes)]
        if wanted is not None:
            found = [p for p in found if p["rule_id"] == wanted]
            if not found:
                return web.json_response({"status": "not_found", "rule_id": wanted}, status=404)
        body = orjson.dumps({"proposals": found})
        return web.Response(body=body, content_type="application/json")

    app.router.add_get("/shapes", _private(token, listing))
    app.router.add_get("/suggest", _private(token, suggest))
