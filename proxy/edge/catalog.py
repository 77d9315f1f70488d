"""The error catalog: ``/_mend/errors`` and ``/_mend/errors/{CODE}`` on the agent port.

Built from the rules in force (a reload shows at once), so every code an envelope carries has a
page its ``docs_url`` points at. Each code is documented as an agent-facing error contract asks:
severity and category, whether it is retryable, its cause, a repair recipe (fix, hint, steps), an
example payload, related codes, stability, and which rules produce it.

The example payload is the rule's own envelope, built through the proxy's path (``rewrite``) from
the rule's ``docs.example`` upstream body when it has one, else from an empty body -- so the
example is exactly what an agent would get for that body. Both renderings (JSON, HTML) are chosen
by ``Accept``; the HTML escapes every value, since rule text is operator input.
"""

from __future__ import annotations

import contextlib
import html
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import quote

import orjson
from aiohttp import web

from proxy.config.settings import Settings
from proxy.policy.envelope.build import BuildOptions
from proxy.policy.envelope.model import Envelope
from proxy.policy.envelope.shared_codes import CodeDoc, load_codes
from proxy.policy.evaluate import agent_redactor, recorded_exchange, rewrite
from proxy.policy.openapi.operation_codes import OperationCodes
from proxy.policy.render.accept import MediaRange, media_ranges
from proxy.policy.rules.rule import ERROR_STATUSES, Match, Rule

BASE = "/_mend/errors"
_EXAMPLE_METHOD, _EXAMPLE_PATH = "POST", "/example"


class _Store(Protocol):
    @property
    def engine(self) -> Any: ...

    @property
    def settings(self) -> Settings: ...


def _example_status(rule: Rule) -> int:
    errors = sorted(rule.statuses & ERROR_STATUSES)
    return errors[0] if errors else min(rule.statuses, default=500)


def example_envelope(rule: Rule, *, own: bool = False, docs_base_url: str = "") -> Envelope | None:
    """The envelope ``rule`` produces for its ``docs.example`` body (or an empty one).

    ``own`` rules are mend's own failures: no upstream status. ``None`` when the rule cannot
    build an envelope from the example alone (it needs variables only a real body has).
    """
    example = rule.docs.example if rule.docs else None
    body = orjson.dumps(example) if example is not None else b""
    headers = {"Content-Type": "application/json"} if example is not None else {}
    exchange = recorded_exchange(
        status=_example_status(rule),
        body=body,
        headers=headers,
        method=_EXAMPLE_METHOD,
        path=_EXAMPLE_PATH,
    )
    exchange.request_id = "req_example"
    if own:
        exchange.status = None
    _, found, _ = rule.test(exchange)
    try:
        built = rewrite(
            Match(rule, found),
            exchange,
            agent_redactor(),
            BuildOptions(docs_base_url=docs_base_url),
        )
    except ValueError:  # the envelope's invariants did not hold for a placeholder exchange
        return None
    return built.envelope


def _literal(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def entries(
    rules: Iterable[Rule],
    own: Iterable[str] = (),
    docs_base_url: str = "",
    codes: Mapping[str, CodeDoc] | None = None,
) -> dict[str, dict[str, Any]]:
    """One entry per code, in order of its first rule.

    A code described in ``codes`` (proxy/policy/envelope/codes.yaml: the shared ones) takes its
    summary, cause and fix from there and its example from its ``example_rule``; any other code is
    described by its first rule. Then every rule that produces the code is listed -- by id, never by
    source file and line, which are the operator's (``mend explain``, the admin port's ``/rules``).
    """
    own_ids = set(own)
    described = codes or {}
    by_code: dict[str, list[Rule]] = {}
    for rule in rules:
        by_code.setdefault(rule.envelope.spec.code, []).append(rule)
    return {
        code: _entry(code, produced, described.get(code), own_ids, docs_base_url)
        for code, produced in by_code.items()
    }


def _example_rule(produced: list[Rule], doc: CodeDoc | None) -> Rule:
    named = doc.example_rule if doc else None
    for rule in produced:
        if rule.id == named:
            return rule
    return next((r for r in produced if r.docs and r.docs.example is not None), produced[0])


def _entry(
    code: str, produced: list[Rule], doc: CodeDoc | None, own_ids: set[str], docs_base_url: str
) -> dict[str, Any]:
    first = _example_rule(produced, doc) if doc else produced[0]
    env, docs = first.envelope, first.docs
    example = example_envelope(first, own=first.id in own_ids, docs_base_url=docs_base_url)
    related: list[str] = []
    for rule in produced:
        related.extend(c for c in rule.envelope.spec.related_codes if c not in related)
    return {
        "code": code,
        "summary": doc.summary if doc else first.description or _literal(env.message),
        "category": env.spec.category.value,
        "severity": env.severity.value,
        "retryable": env.action.value == "retry",
        "action": env.action.value,
        "cause": doc.cause if doc else (docs.cause if docs else None) or first.description,
        "repair": {
            "fix": doc.fix if doc else (docs.fix if docs else None) or _literal(env.hint),
            "hint": example.hint if example else _literal(env.hint),
            "steps": list(example.steps) if example else [],
        },
        "example": None if example is None else {"error": example.as_dict()},
        "example_rule": first.id,
        "example_upstream_body": docs.example if docs else None,
        "related_codes": related,
        "stability": docs.stability if docs else "stable",
        "generic": all(rule.is_fallback for rule in produced),
        "docs_url": f"{docs_base_url}{BASE}/{code}",
        "rules": [
            {
                "id": rule.id,
                "pack": rule.pack,
                "description": rule.description,
                "statuses": _statuses(rule.statuses) if rule.id not in own_ids else None,
                "action": rule.envelope.action.value,
            }
            for rule in produced
        ],
    }


def _statuses(codes: frozenset[int]) -> str:
    """``{400, 422}`` -> ``"400, 422"``; runs of consecutive codes are shown as ranges."""
    ordered = sorted(codes)
    runs: list[tuple[int, int]] = []
    for code in ordered:
        if runs and code == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], code)
        else:
            runs.append((code, code))
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


class Catalog:
    """The catalog of the engine in force, rebuilt only when a reload swapped the engine.

    Reloads build it in their thread (``refresh``); a page request on the event loop that finds
    a build under way serves the previous catalog rather than wait for it.
    """

    def __init__(self, store: _Store, docs_base_url: str | None = None) -> None:
        self.store = store
        base = store.settings.public_url if docs_base_url is None else docs_base_url
        self.docs_base_url = (base or "").rstrip("/")
        # engine and its entries in one value: two builders can never leave them mismatched
        self._built: tuple[Any, dict[str, dict[str, Any]]] | None = None
        self.codes = load_codes()  # shipped with the package: read once, not reloaded
        self._building = threading.Lock()
        #: per documented operation, the codes it can produce (routes with ``openapi:``)
        self.operations = OperationCodes(store)

    def entries(self, wait: bool = True) -> dict[str, dict[str, Any]]:
        """The entries of the engine in force; with ``wait=False``, the previous ones while
        another thread builds them."""
        built = self._built
        if built is not None and built[0] is self.store.engine:
            return built[1]
        if not self._building.acquire(blocking=wait or built is None):
            assert built is not None
            return built[1]
        try:
            engine = self.store.engine
            built = self._built
            if built is None or built[0] is not engine:
                built = self._built = (
                    engine,
                    entries(engine.rules, engine.own, self.docs_base_url, self.codes),
                )
            return built[1]
        finally:
            self._building.release()

    def refresh(self, ok: bool, rules: int) -> None:
        """A reload listener: build the new engine's catalog in the reloading thread.

        Built on first request instead, it held the event loop for about 0.3 s (every example
        envelope of ~240 rules), and every proxied request with it. A failure here must not
        fail the reload, which has already swapped the rules in; the page that next asks
        builds again and reports it.
        """
        if ok:
            with contextlib.suppress(Exception):
                self.entries()
                self.operations.get()


# --- rendering ----------------------------------------------------------------------------------


#: What a range naming the type itself, ``type/*`` or ``*/*`` adds to its q: the more specific of
#: two equal q wins.
_SPECIFICITY_BONUS = (0.0, 0.001, 0.002)


def _quality(ranges: Sequence[MediaRange], kind: str, subtype: str) -> float:
    """The best q any range gives ``kind/subtype``, plus its specificity bonus; -1 when none."""
    best = -1.0
    for media in ranges:
        specificity = media.specificity(kind, subtype)
        if specificity is not None:
            q = media.q
            best = max(best, q + _SPECIFICITY_BONUS[specificity] if q > 0 else 0.0)
    return best


def wants_html(accept: str | None) -> bool:
    """HTML when ``Accept`` prefers text/html over application/json; JSON otherwise."""
    if not accept:
        return False
    ranges = media_ranges(accept)
    html_q, json_q = _quality(ranges, "text", "html"), _quality(ranges, "application", "json")
    return html_q > 0 and html_q > json_q


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3rem .6rem;"
    "text-align:left;vertical-align:top}pre{background:#f6f6f6;padding:1rem;overflow:auto}"
    "code{background:#f6f6f6}"
)


def _page(title: str, body: str) -> str:
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>{body}</body></html>"
    )


def _link(code: str, known: dict[str, Any]) -> str:
    if code in known:
        return f"<a href='{_e(BASE + '/' + quote(code, safe=''))}'><code>{_e(code)}</code></a>"
    return f"<code>{_e(code)}</code>"


def index_html(catalog: dict[str, dict[str, Any]]) -> str:
    rows = "".join(
        f"<tr><td>{_link(code, catalog)}</td><td>{_e(e['category'])}</td>"
        f"<td>{_e(e['severity'])}</td><td>{'yes' if e['retryable'] else 'no'}</td>"
        f"<td>{_e(e['action'])}</td><td>{_e(e['summary'])}</td></tr>"
        for code, e in sorted(catalog.items())
    )
    table = (
        "<h1>mend error catalog</h1>"
        f"<p>{len(catalog)} codes. Every envelope's <code>docs_url</code> points at its page.</p>"
        "<table><tr><th>code</th><th>category</th><th>severity</th><th>retryable</th>"
        f"<th>action</th><th>summary</th></tr>{rows}</table>"
    )
    return _page("mend error catalog", table)


def entry_html(entry: dict[str, Any], catalog: dict[str, dict[str, Any]]) -> str:
    code = entry["code"]
    repair = entry["repair"]
    facts = "".join(
        f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>"
        for k, v in (
            ("severity", entry["severity"]),
            ("category", entry["category"]),
            ("retryable", "yes" if entry["retryable"] else "no"),
            ("action", entry["action"]),
            ("stability", entry["stability"]),
        )
    )
    steps = "".join(f"<li>{_e(s)}</li>" for s in repair["steps"])
    related = ", ".join(_link(c, catalog) for c in entry["related_codes"]) or "none"
    operations = "".join(
        f"<li><code>{_e(o['method'])} {_e(o['path'])}</code> ({_e(o['id'])})</li>"
        for o in entry.get("operations", ())
    )
    rules = "".join(
        f"<tr><td><code>{_e(r['id'])}</code></td><td>{_e(r['pack'])}</td>"
        f"<td>{_e(r['statuses'] or 'none (mend itself)')}</td><td>{_e(r['description'])}</td></tr>"
        for r in entry["rules"]
    )
    example = (
        f"<pre>{_e(orjson.dumps(entry['example'], option=orjson.OPT_INDENT_2).decode())}</pre>"
        if entry["example"] is not None
        else "<p>No example: this code is built from values only a real response has.</p>"
    )
    upstream = entry["example_upstream_body"]
    upstream_html = (
        "<p>for this upstream body:</p>"
        f"<pre>{_e(orjson.dumps(upstream, option=orjson.OPT_INDENT_2).decode())}</pre>"
        if upstream is not None
        else ""
    )
    generic = (
        "<p><em>Only mend's built-in status fallback produces this code: no rule knows the "
        "upstream's error format yet.</em></p>"
        if entry["generic"]
        else ""
    )
    body = (
        f"<p><a href='{BASE}'>all codes</a></p><h1><code>{_e(code)}</code></h1>"
        f"<p>{_e(entry['summary'])}</p>{generic}<table>{facts}</table>"
        f"<h2>Cause</h2><p>{_e(entry['cause'] or 'Not documented.')}</p>"
        f"<h2>Repair</h2><p>{_e(repair['fix'])}</p>"
        f"<p>Hint: {_e(repair['hint'])}</p><ol>{steps}</ol>"
        f"<h2>Example payload</h2>{example}{upstream_html}"
        f"<h2>Related codes</h2><p>{related}</p>"
        + (f"<h2>Documented operations</h2><ul>{operations}</ul>" if operations else "")
        + "<h2>Produced by</h2><table><tr><th>rule</th><th>pack</th><th>statuses</th>"
        f"<th>description</th></tr>{rules}</table>"
    )
    return _page(code, body)


def _produces(codes: dict[str, list[str]], code: str) -> bool:
    return any(code in listed for listed in codes.values())


_PAGE_METHODS = frozenset({"GET", "HEAD"})
CatalogPages = Callable[[web.BaseRequest], Awaitable[web.Response | None]]


def catalog_pages(catalog: Catalog) -> CatalogPages:
    """The catalog's pages: GET or HEAD of ``BASE`` and ``BASE/{code}``; ``None`` for all else.

    Links are relative unless ``public_url`` (or the catalog's ``docs_base_url``) says otherwise.
    """

    def index(as_html: bool) -> web.Response:
        found = catalog.entries(wait=False)
        if as_html:
            return web.Response(text=index_html(found), content_type="text/html")
        errors = sorted(found.values(), key=lambda e: e["code"])
        operations = catalog.operations.get()
        document = {"errors": errors, **({"operations": operations} if operations else {})}
        return web.Response(body=orjson.dumps(document), content_type="application/json")

    def one(code: str, as_html: bool) -> web.Response:
        found = catalog.entries(wait=False)
        entry = found.get(code)
        if entry is None:
            if as_html:
                text = _page("not found", f"<h1>No code <code>{_e(code[:64])}</code></h1>")
                return web.Response(status=404, text=text, content_type="text/html")
            return web.Response(
                status=404,
                body=orjson.dumps({"error": f"no code {code[:64]!r} in the catalog"}),
                content_type="application/json",
            )
        operations = [
            o["operation"] for o in catalog.operations.get() if _produces(o["codes"], code)
        ]
        if operations:
            entry = {**entry, "operations": operations}
        if as_html:
            return web.Response(text=entry_html(entry, found), content_type="text/html")
        return web.Response(body=orjson.dumps(entry), content_type="application/json")

    async def pages(request: web.BaseRequest) -> web.Response | None:
        if request.method not in _PAGE_METHODS:
            return None
        path = request.path
        if path == BASE:
            return index(wants_html(request.headers.get("Accept")))
        code = path.removeprefix(BASE + "/")
        if code != path and code and "/" not in code:
            return one(code, wants_html(request.headers.get("Accept")))
        return None

    return pages
