"""The admin page and its JSON (issue 40): ``GET /`` on the admin port, server-rendered HTML.

No external asset and no build step: a Jinja2 template, a stylesheet and a small script served
from this origin (``proxy/runtime/page/``), under a Content-Security-Policy that allows nothing
else. The page works without its script (every section is rendered here; the playground is a
form); with it, the live sections refresh every five seconds.

Every section is also JSON (``/cockpit.json`` whole, or ``/routes``, ``/failures``, ``/reloads``,
``/shapes``, ``/suggest``, ``POST /explain``). They show upstream answers, masked but the
operator's to read: with an admin token set they need it, as ``Authorization: Bearer <token>``
or, for a browser, HTTP Basic with the token as the password. ``/rules`` stays open, as
``/metrics`` is (its hits are the metrics' counts).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson
from aiohttp import web

from proxy import __version__
from proxy.config.yamlfile import RuleError
from proxy.runtime.cockpit import Cockpit, Playground, PlaygroundError

if TYPE_CHECKING:
    import jinja2

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: the page may load only what this origin serves, and be framed by nobody
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
#: the POSTs that change nothing, which a browser's Basic credentials may send
READ_ONLY_POSTS = frozenset({"/playground", "/explain"})
_ASSETS = {"admin.css": "text/css", "admin.js": "text/javascript"}


def private(token: str | None, handler: Handler) -> Handler:
    """``handler`` behind the admin token when one is set: ``Bearer <token>``, or Basic with the
    token as the password (what a browser can send); compared in constant time."""
    if token is None:
        return handler
    expected = token.encode()

    async def guarded(request: web.Request) -> web.StreamResponse:
        if not hmac.compare_digest(_presented(request), expected):
            return web.json_response(
                {"status": "unauthorized", "detail": "send Authorization: Bearer <admin token>"},
                status=401,
                headers=[
                    ("WWW-Authenticate", 'Basic realm="mend admin", charset="UTF-8"'),
                    ("WWW-Authenticate", 'Bearer realm="mend admin"'),
                ],
            )
        return await handler(request)

    return guarded


def _presented(request: web.Request) -> bytes:
    """The token a request presents (empty: none that reads)."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return value.strip().encode("utf-8", "replace")
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True)
        except (binascii.Error, ValueError):
            return b""
        return decoded.partition(b":")[2]
    return b""


def _same_origin(request: web.Request) -> bool:
    """A browser's POST comes from this page, not another site's (the playground only reads,
    but a browser sends its Basic credentials to whoever asks it to). A browser says so in
    ``Sec-Fetch-Site``; its ``Origin`` is ``null`` under the page's ``no-referrer`` policy, so it
    is read only from a client that sends no ``Sec-Fetch-Site``."""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = request.headers.get("Origin")
    return origin is None or urlsplit(origin).netloc == request.host


def _json(value: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(value), status=status, content_type="application/json")


class Page:
    """The page's template, loaded on the first request (Jinja2 is not imported before)."""

    def __init__(self, cockpit: Cockpit) -> None:
        self.cockpit = cockpit
        self._template: jinja2.Template | None = None

    def template(self) -> jinja2.Template:
        if self._template is None:
            import jinja2  # noqa: PLC0415 - the page's own library, only when it is asked for

            env = jinja2.Environment(
                loader=jinja2.PackageLoader("proxy.runtime", "page"),
                autoescape=True,
                undefined=jinja2.StrictUndefined,
            )
            env.filters["when"] = _when
            env.filters["pretty"] = _pretty
            self._template = env.get_template("index.html")
        return self._template

    def render(self, **playground: Any) -> web.Response:
        context: dict[str, Any] = {"given": None, "explained": None, "problem": None}
        context |= {**self.cockpit.overview(), "version": __version__, **playground}
        html = self.template().render(**context)
        return web.Response(text=html, content_type="text/html", headers=PAGE_HEADERS)


def _when(epoch: float) -> str:
    ago = max(0, int(time.time() - epoch))
    stamp = time.strftime("%H:%M:%S UTC", time.gmtime(epoch))
    return f"{stamp} ({ago} s ago)" if ago < 120 else f"{stamp} ({ago // 60} min ago)"


def _pretty(value: Any) -> str:
    """A JSON document (or a JSON text) indented; any other text as it is."""
    if isinstance(value, str):
        text: str = value
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            return text
    indented: bytes = orjson.dumps(value, option=orjson.OPT_INDENT_2)
    return indented.decode()


def add_cockpit_routes(app: web.Application, cockpit: Cockpit, token: str | None) -> None:
    """The page, its assets and its JSON on the admin ``app``."""
    page = Page(cockpit)

    async def index(_: web.Request) -> web.Response:
        return page.render()

    async def playground(request: web.Request) -> web.Response:
        if not _same_origin(request):
            return _json({"status": "forbidden", "detail": "a POST from another site"}, 403)
        form = {k: str(v) for k, v in (await request.post()).items()}
        try:
            given = Playground.of(form)
            return page.render(given=given, explained=cockpit.explain(given))
        except PlaygroundError as exc:
            return page.render(problem=str(exc))

    async def explain(request: web.Request) -> web.Response:
        if not _same_origin(request):
            return _json({"status": "forbidden", "detail": "a POST from another site"}, 403)
        try:
            given = Playground.of(await request.json(loads=orjson.loads))
        except (orjson.JSONDecodeError, AttributeError, TypeError):
            return _json({"status": "invalid", "detail": "send a JSON object"}, 400)
        except PlaygroundError as exc:
            return _json({"status": "invalid", "detail": str(exc)}, 400)
        try:
            return _json(cockpit.explain(given))
        except PlaygroundError as exc:
            return _json({"status": "invalid", "detail": str(exc)}, 400)

    async def asset(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        text = resources.files("proxy.runtime").joinpath("page", name).read_text("utf-8")
        return web.Response(text=text, content_type=_ASSETS[name], headers=PAGE_HEADERS)

    async def proposal(request: web.Request) -> web.Response:
        name = request.match_info["file"]
        rule_id, part = (
            (name[: -len(".cases.yaml")], "cases")
            if name.endswith(".cases.yaml")
            else (name.removesuffix(".yaml"), "rules")
        )
        found = next((p for p in cockpit.proposals() if p.rule_id == rule_id), None)
        if found is None:
            return _json({"status": "not_found", "rule_id": rule_id}, 404)
        text = found.rules if part == "rules" else found.cases
        filename = f"{found.name}.yaml" if part == "rules" else f"{found.name}.cases.yaml"
        disposition = f'attachment; filename="{filename}"'
        return web.Response(
            text=text, content_type="application/yaml", headers={"Content-Disposition": disposition}
        )

    def view(read: Callable[[], Any], key: str) -> Handler:
        async def answer(_: web.Request) -> web.Response:
            return _json({key: read()})

        return answer

    async def rules(_: web.Request) -> web.Response:
        try:
            return _json({"rules": cockpit.rules()})
        except RuleError as exc:
            return _json({"problems": list(exc.problems)}, 422)

    async def suggest(request: web.Request) -> web.Response:
        wanted = request.query.get("rule_id")
        found = [p.as_dict() for p in cockpit.proposals()]
        if wanted is not None:
            found = [p for p in found if p["rule_id"] == wanted]
            if not found:
                return _json({"status": "not_found", "rule_id": wanted}, 404)
        return _json({"proposals": found})

    async def overview(_: web.Request) -> web.Response:
        return _json(cockpit.overview())

    async def shapes(_: web.Request) -> web.Response:
        return _json({"shapes": [seen.as_dict() for seen in cockpit.shapes()]})

    app.router.add_get("/rules", rules)
    app.router.add_get("/{name:admin\\.(?:css|js)}", asset)
    for path, handler in (
        ("/", index),
        ("/cockpit.json", overview),
        ("/routes", view(cockpit.routes, "routes")),
        ("/failures", view(cockpit.failures, "failures")),
        ("/reloads", view(cockpit.reloads, "reloads")),
        ("/shapes", shapes),
        ("/suggest", suggest),
        ("/suggest/{file}", proposal),
    ):
        app.router.add_get(path, private(token, handler))
    app.router.add_post("/playground", private(token, playground))
    app.router.add_post("/explain", private(token, explain))
