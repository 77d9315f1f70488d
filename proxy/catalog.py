"""The error catalog: ``/_mend/errors`` and ``/_mend/errors/{CODE}`` on the agent port.

Built from the rules in force, so every code an envelope carries has a page its ``docs_url``
points at: what it means, whether to retry, how to repair, which rules produce it.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any, Protocol

import orjson
from aiohttp import web

from proxy.ruleset import Rule


class _Store(Protocol):
    @property
    def engine(self) -> Any: ...


def entries(rules: Iterable[Rule]) -> dict[str, dict[str, Any]]:
    """One entry per code; the first rule that produces a code describes it."""
    out: dict[str, dict[str, Any]] = {}
    for rule in rules:
        env = rule.envelope
        code = env.spec.code
        entry = out.get(code)
        if entry is None:
            docs = rule.docs
            entry = out[code] = {
                "code": code,
                "category": env.spec.category.value,
                "severity": env.severity.value,
                "action": env.action.value,
                "retryable": env.action.value == "retry",
                "summary": rule.description
                or (env.message if isinstance(env.message, str) else None),
                "cause": docs.cause if docs else None,
                "fix": docs.fix if docs else (env.hint if isinstance(env.hint, str) else None),
                "example": docs.example if docs else None,
                "stability": docs.stability if docs else "stable",
                "related_codes": list(env.spec.related_codes),
                "rules": [],
            }
        entry["rules"].append(rule.id)
    return out


def _page(title: str, body: str) -> str:
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title></head><body>{body}</body></html>"
    )


def _wants_html(request: web.Request) -> bool:
    accept = request.headers.get("Accept", "")
    return "text/html" in accept and "application/json" not in accept


def catalog_routes(store: _Store) -> list[web.RouteDef]:
    async def index(request: web.Request) -> web.Response:
        catalog = entries(store.engine.rules)
        if _wants_html(request):
            rows = "".join(
                f"<tr><td><a href='/_mend/errors/{html.escape(c)}'>{html.escape(c)}</a></td>"
                f"<td>{html.escape(e['category'])}</td><td>{html.escape(e['action'])}</td>"
                f"<td>{html.escape(e['summary'] or '')}</td></tr>"
                for c, e in sorted(catalog.items())
            )
            table = f"<h1>mend error catalog</h1><table>{rows}</table>"
            return web.Response(text=_page("mend error catalog", table), content_type="text/html")
        return web.Response(
            body=orjson.dumps({"errors": sorted(catalog.values(), key=lambda e: e["code"])}),
            content_type="application/json",
        )

    async def one(request: web.Request) -> web.Response:
        code = request.match_info["code"]
        entry = entries(store.engine.rules).get(code)
        if entry is None:
            raise web.HTTPNotFound(
                body=orjson.dumps({"error": f"no code {code[:64]!r} in the catalog"}),
                content_type="application/json",
            )
        if _wants_html(request):
            items = "".join(
                f"<dt>{html.escape(k)}</dt><dd>{html.escape(str(v))}</dd>" for k, v in entry.items()
            )
            return web.Response(
                text=_page(code, f"<h1>{html.escape(code)}</h1><dl>{items}</dl>"),
                content_type="text/html",
            )
        return web.Response(body=orjson.dumps(entry), content_type="application/json")

    return [web.get("/_mend/errors", index), web.get("/_mend/errors/{code}", one)]
