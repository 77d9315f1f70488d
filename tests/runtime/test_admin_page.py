"""The admin page in a real browser, and its JSON (issue 40 §3, §4).

A real mend process fronts two real apps failing in ways no shipped pack knows (aiohttp:
``unexplained_upstream.py``; Flask: ``cockpit_flask_app.py``); Debian's chromium, driven by
Selenium through Debian's chromedriver, reads the page. Screenshots go to ``$MEND_SCREENSHOTS``
(else the test's tmp directory); each test prints where.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.hostile.procs import MendProcess, mend_process, module_server
from tests.runtime.cockpit_flask_app import BODY_SECRET, HEADER_SECRET
from tests.runtime.unexplained_upstream import PASSWORD, SECRET

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "the-admin-token-of-the-page"
PLANTED = (SECRET, PASSWORD, BODY_SECRET, HEADER_SECRET, TOKEN)
CHROMIUM, DRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


@pytest.fixture(scope="module")
def billing() -> Iterator[str]:
    """The aiohttp API, a process of its own, stopped by its PID."""
    with module_server("tests.runtime.unexplained_upstream", ROOT) as url:
        yield url


@pytest.fixture(scope="module")
def shipping() -> Iterator[str]:
    """The Flask app, a process of its own, stopped by its PID."""
    with module_server("tests.runtime.cockpit_flask_app", ROOT) as url:
        yield url


@contextmanager
def _mend(tmp: Path, billing: str, shipping: str, **config: Any) -> Iterator[MendProcess]:
    tmp.mkdir(exist_ok=True)
    routes = [
        {"name": "billing", "upstream": billing, "prefix": "/billing", "strip_prefix": True},
        {"name": "shipping", "upstream": shipping, "prefix": "/shipping", "strip_prefix": True},
    ]
    settings = {"watch_rules": False, "routes": routes, "admin_token": TOKEN, **config}
    with mend_process(tmp, settings) as mend:
        yield mend


def _send(
    url: str,
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
    method: str | None = None,
) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def _traffic(mend: MendProcess) -> None:
    """Failures no pack knows on both routes."""
    base = f"http://127.0.0.1:{mend.port}"
    json_type = {"Content-Type": "application/json", "Origin": "http://agent.example"}
    for _ in range(2):
        _send(f"{base}/billing/orders", b'{"qty": 0}', json_type)
    _send(f"{base}/billing/invoices/17")
    _send(f"{base}/shipping/shipments", b"{}", json_type)


def _bearer() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


def _admin_json(mend: MendProcess, path: str) -> Any:
    status, _, body = _send(f"http://127.0.0.1:{mend.admin_port}{path}", headers=_bearer())
    assert status == 200, body
    return json.loads(body)


def _screenshots(tmp: Path) -> Path:
    where = Path(os.environ.get("MEND_SCREENSHOTS", tmp))
    where.mkdir(parents=True, exist_ok=True)
    return where


@pytest.fixture
def browser() -> Iterator[Any]:
    """Headless chromium, sending the admin token on every request (as an operator's browser
    sends the Basic credentials it was asked for)."""
    if not (CHROMIUM.exists() and DRIVER.exists()):
        pytest.skip("chromium and chromium-driver are not installed (scripts/install-system-deps)")
    from selenium import webdriver  # noqa: PLC0415 - only these tests drive a browser
    from selenium.webdriver.chrome.service import Service  # noqa: PLC0415

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.add_argument("--window-size=1400,2200")
    driver = webdriver.Chrome(service=Service(str(DRIVER)), options=options)
    driver.set_page_load_timeout(30)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": _bearer()})
    try:
        yield driver
    finally:
        driver.quit()


def _wait(condition: Any, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError("the page never showed it")


def test_the_page_shows_routes_hits_failures_side_by_side_and_shapes(
    tmp_path: Path, billing: str, shipping: str, browser: Any
) -> None:
    """After real traffic, the page lists both routes with their upstreams, the fallback rules'
    hits, each failure with the upstream's answer beside the agent's, and the unexplained
    shapes with a proposed rule; no planted secret is on it."""
    from selenium.webdriver.common.by import By  # noqa: PLC0415

    with _mend(tmp_path, billing, shipping) as mend:
        _traffic(mend)
        browser.get(f"http://127.0.0.1:{mend.admin_port}/")
        shot = _screenshots(tmp_path) / "admin-page.png"
        browser.save_screenshot(str(shot))
        print(f"screenshot: {shot}")
        routes = [
            r.get_attribute("data-route")
            for r in browser.find_elements(By.CSS_SELECTOR, "tr[data-route]")
        ]
        hits = {
            r.get_attribute("data-rule"): r.find_element(By.TAG_NAME, "td").text
            for r in browser.find_elements(By.CSS_SELECTOR, "tr[data-rule]")
        }
        failures = browser.find_elements(By.CSS_SELECTOR, "article.failure")
        first = failures[0]
        upstream = first.find_element(By.CSS_SELECTOR, ".side.upstream pre").text
        agent = first.find_element(By.CSS_SELECTOR, ".side.agent pre").text
        shapes = browser.find_elements(By.CSS_SELECTOR, "article.shape")
        source = browser.page_source
    assert routes == ["billing", "shipping"]
    assert billing.removeprefix("http://") in source
    assert (hits["fallback.422"], hits["fallback.500"]) == ("2", "1")
    assert len(failures) == 4
    assert "narrative" in upstream  # the Flask app's body, newest first
    assert json.loads(agent)["error"]["code"] == "CONFLICT"
    assert len(shapes) == 3
    assert all(secret not in source for secret in PLANTED)


def test_a_rule_copied_from_the_page_is_loaded_by_reload_and_explains_the_next_answer(
    tmp_path: Path, billing: str, shipping: str, browser: Any
) -> None:
    """The proposed rule's text, as the page's copy button takes it, saved into the rule
    directory and reloaded: the next such 422 gets that rule's envelope, whose message is the
    upstream's own."""
    from selenium.webdriver.common.by import By  # noqa: PLC0415

    rules = tmp_path / "rules"
    rules.mkdir()
    with _mend(tmp_path, billing, shipping, rules=[str(rules)]) as mend:
        _traffic(mend)
        admin = f"http://127.0.0.1:{mend.admin_port}"
        browser.get(f"{admin}/")
        shape = next(
            s
            for s in browser.find_elements(By.CSS_SELECTOR, "article.shape")
            if "422" in s.find_element(By.TAG_NAME, "h3").text
        )
        (rules / "proposed.yaml").write_text(
            shape.find_element(By.CSS_SELECTOR, "pre.proposal").get_attribute("textContent")
        )
        reloaded = _send(f"{admin}/-/reload", b"", _bearer(), "POST")
        _, _, body = _send(
            f"http://127.0.0.1:{mend.port}/billing/orders",
            b'{"qty": 0}',
            {"Content-Type": "application/json"},
        )
        browser.get(f"{admin}/")
        state = browser.find_element(By.ID, "reload-state").text
    assert reloaded[0] == 200, reloaded
    error = json.loads(body)["error"]
    assert error["rule"].startswith("suggested.billing_422_")
    assert (error["message"], error["field"]) == ("qty must be between 1 and 99", "/qty")
    assert state.startswith("last: loaded")


def test_the_page_refreshes_its_failures_without_a_reload(
    tmp_path: Path, billing: str, shipping: str, browser: Any
) -> None:
    """A failure that happens while the page is open appears on it, the page not reloaded (the
    marker set on the document before stays)."""
    from selenium.webdriver.common.by import By  # noqa: PLC0415

    with _mend(tmp_path, billing, shipping) as mend:
        browser.get(f"http://127.0.0.1:{mend.admin_port}/")
        browser.execute_script("window.mendMarker = 1")
        assert browser.find_elements(By.CSS_SELECTOR, "article.failure") == []
        _traffic(mend)
        # the page asks every 5 s; a loaded machine may take a few turns
        _wait(lambda: len(browser.find_elements(By.CSS_SELECTOR, "article.failure")) == 4, 45)
        marker = browser.execute_script("return window.mendMarker")
    assert marker == 1


def _explain_cli(path: str, status: int, body: str) -> dict[str, Any]:
    command = [sys.executable, "-m", "proxy", "explain", "--json", "--status", str(status)]
    command += ["--header", "Content-Type: application/json", "--body", body, "--path", path]
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def _without_id(envelope: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in envelope["error"].items() if k not in ("request_id", "docs_url")}


def test_the_playground_gives_the_envelope_mend_explain_gives(
    tmp_path: Path, billing: str, shipping: str, browser: Any
) -> None:
    """A FastAPI 422 pasted into the playground's form, in the browser, gives the envelope and
    rule ``mend explain`` gives for the same status, headers and body."""
    from selenium.webdriver.common.by import By  # noqa: PLC0415

    body = '{"detail": [{"type": "missing", "loc": ["body", "qty"], "msg": "Field required"}]}'
    with _mend(tmp_path, billing, shipping) as mend:
        browser.get(f"http://127.0.0.1:{mend.admin_port}/")
        form = browser.find_element(By.CSS_SELECTOR, "#playground form")
        form.find_element(By.NAME, "path").clear()
        form.find_element(By.NAME, "path").send_keys("/billing/orders")
        form.find_element(By.NAME, "status").send_keys("422")
        browser.execute_script(
            "arguments[0].value = arguments[1]", form.find_element(By.NAME, "body"), body
        )
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        shown = _wait(lambda: browser.find_elements(By.ID, "envelope"))[0].text
        browser.save_screenshot(str(_screenshots(tmp_path) / "admin-playground.png"))
    expected = _explain_cli("/billing/orders", 422, body)
    assert expected["matched"]["rule"] == "fastapi.validation"
    assert _without_id(json.loads(shown)) == _without_id(expected["envelope"])


def test_the_page_and_its_json_need_the_token_and_say_how_to_send_it(
    tmp_path: Path, billing: str, shipping: str
) -> None:
    """Without the token the page and every view answer 401 with a Basic challenge a browser
    can answer; with Basic (the token as the password) the page is served under its CSP."""
    with _mend(tmp_path, billing, shipping) as mend:
        admin = f"http://127.0.0.1:{mend.admin_port}"
        paths = ("/", "/cockpit.json", "/routes", "/failures", "/reloads", "/shapes", "/suggest")
        refused = [_send(f"{admin}{p}") for p in paths]
        basic = base64.b64encode(f"operator:{TOKEN}".encode()).decode()
        status, headers, _ = _send(f"{admin}/", headers={"Authorization": f"Basic {basic}"})
    assert {r[0] for r in refused} == {401}
    assert all("Basic" in r[1]["WWW-Authenticate"] for r in refused)
    assert status == 200
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    assert headers["Server"] == "mend"


def test_the_json_views_hold_what_the_page_shows_and_no_secret(
    tmp_path: Path, billing: str, shipping: str
) -> None:
    """``/cockpit.json`` has the routes (no credentials in an upstream), the rules with hits,
    the reloads, the failures and the shapes with proposals; no planted secret is in it."""
    with _mend(tmp_path, billing, shipping) as mend:
        _traffic(mend)
        cockpit = _admin_json(mend, "/cockpit.json")
    text = json.dumps(cockpit)
    hits = {r["id"]: r["hits"] for r in cockpit["rules"]}
    assert [r["name"] for r in cockpit["routes"]] == ["billing", "shipping"]
    assert hits["fallback.422"] == 2
    assert cockpit["reloads"][0]["ok"] is True
    assert [f["upstream"]["status"] for f in cockpit["failures"]] == [409, 500, 422, 422]
    assert {s["proposal"]["rule_id"].split("_")[0] for s in cockpit["shapes"]} == {
        "suggested.billing",
        "suggested.shipping",
    }
    assert all(secret not in text for secret in PLANTED)


def test_a_playground_post_from_another_site_is_refused(
    tmp_path: Path, billing: str, shipping: str
) -> None:
    """A browser sends its Basic credentials to whoever asks it to: a POST whose ``Origin`` is
    another site's, or that the browser says is cross-site, is refused, though the playground
    only reads."""
    with _mend(tmp_path, billing, shipping) as mend:
        admin = f"http://127.0.0.1:{mend.admin_port}"
        headers = {**_bearer(), "Origin": "http://evil.example", "Content-Type": "application/json"}
        status, _, _ = _send(f"{admin}/explain", b'{"status": 500}', headers, "POST")
        fetched = {**_bearer(), "Sec-Fetch-Site": "cross-site", "Origin": "null"}
        cross, _, _ = _send(f"{admin}/playground", b"status=500", fetched, "POST")
        same = {**headers, "Origin": admin}
        allowed, _, body = _send(
            f"{admin}/explain", b'{"status": 500, "body": "x", "route": "billing"}', same, "POST"
        )
    assert (status, cross, allowed) == (403, 403, 200)
    assert json.loads(body)["matched"]["rule"] == "fallback.500"


def test_the_workers_supervisor_shows_what_its_workers_saw(
    tmp_path: Path, billing: str, shipping: str
) -> None:
    """With ``--workers 2`` the admin port is the supervisor's, which sees no request: the
    failures and shapes it shows are the workers' books, merged."""
    with _mend(tmp_path, billing, shipping, workers=2) as mend:
        _traffic(mend)
        cockpit = _wait(lambda: (c := _admin_json(mend, "/cockpit.json"))["failures"][3:] and c)
    assert len(cockpit["failures"]) == 4
    assert sum(s["count"] for s in cockpit["shapes"]) == 4


def test_the_rules_view_stays_open_with_hits(tmp_path: Path, billing: str, shipping: str) -> None:
    """``/rules`` is open, as ``/metrics`` is, and counts each rule's hits."""
    with _mend(tmp_path, billing, shipping) as mend:
        _traffic(mend)
        status, _, body = _send(f"http://127.0.0.1:{mend.admin_port}/rules")
    hits = {r["id"]: r["hits"] for r in json.loads(body)["rules"]}
    assert status == 200
    assert hits["fallback.500"] == 1


def test_replicas_sharing_redis_show_each_other_s_failures_and_shapes(
    tmp_path: Path, billing: str, shipping: str
) -> None:
    """Two replicas with one ``state: redis://``: traffic through the first only, the second's
    page shows its failures and shapes (within a few exchanges with the store)."""
    from tests.redis_server import running_redis  # noqa: PLC0415

    with running_redis(tmp_path) as redis, ExitStack() as replicas:
        state = {"state": redis.url}
        first = replicas.enter_context(_mend(tmp_path / "a", billing, shipping, **state))
        second = replicas.enter_context(_mend(tmp_path / "b", billing, shipping, **state))
        _traffic(first)
        seen = _wait(lambda: (c := _admin_json(second, "/cockpit.json"))["failures"][3:] and c, 45)
        mine = _admin_json(first, "/cockpit.json")
    assert {f["request_id"] for f in seen["failures"]} == {
        f["request_id"] for f in mine["failures"]
    }
    assert sum(s["count"] for s in seen["shapes"]) == 4


def test_an_upstream_s_password_is_not_on_the_page(
    tmp_path: Path, billing: str, shipping: str
) -> None:
    """An upstream URL with a user and password is shown with them masked, on the page and in
    ``/routes``."""
    secret_billing = billing.replace("http://", "http://ops:planted-url-password@")
    with _mend(tmp_path, secret_billing, shipping) as mend:
        routes = _admin_json(mend, "/routes")["routes"]
        _, _, page = _send(f"http://127.0.0.1:{mend.admin_port}/", headers=_bearer())
    assert routes[0]["upstream"] == billing.replace("http://", "http://***@")
    assert b"planted-url-password" not in page
