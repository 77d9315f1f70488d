"""Redaction: nothing internal from an upstream reaches an agent; the operator log keeps traces.

The corpus (tests/corpus/leaks, described by its manifest.yaml) holds realistic leaking bodies
with planted markers; the property tests generate each leak family around random markers, so
that what is tested is the family, not the fixtures.
"""

from __future__ import annotations

import base64
import hashlib
import re
import string
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.policy import regex
from proxy.policy.redaction import KINDS, NEUTRAL, Redactor, Scrubbed, is_internal_header, markup
from proxy.policy.redaction import engine as redact_module
from proxy.policy.redaction import gated as gated_module

CORPUS = Path(__file__).parents[2] / "corpus" / "leaks"
MANIFEST: dict[str, dict[str, Any]] = yaml.safe_load(
    (CORPUS / "manifest.yaml").read_text(encoding="utf-8")
)
CORPUS_FILES = sorted(MANIFEST)
MAX_LENGTH = 300

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def redactor() -> Redactor:
    return Redactor()


def _body(name: str) -> str:
    return (CORPUS / name).read_text(encoding="utf-8")


def _leaked(markers: list[str], text: str) -> list[str]:
    lowered = text.lower()
    return [marker for marker in markers if marker.lower() in lowered]


# --- the corpus ---------------------------------------------------------------------------------


def test_corpus_is_described_by_its_manifest() -> None:
    """Every corpus body has a manifest entry with markers, and there are at least 50 of them."""
    on_disk = sorted(p.name for p in CORPUS.iterdir() if p.name != "manifest.yaml")
    assert on_disk == CORPUS_FILES
    assert len(CORPUS_FILES) >= 50
    for name, entry in MANIFEST.items():
        assert entry["markers"], name
        body = _body(name).lower()
        for marker in entry["markers"] + entry.get("secrets", []):
            assert marker.lower() in body, (name, marker)


@pytest.mark.parametrize("name", CORPUS_FILES)
def test_scrub_leaks_no_marker_of_a_corpus_body(redactor: Redactor, name: str) -> None:
    """No planted marker (class, path, host, SQL, secret...) of a leaking body survives scrub."""
    entry = MANIFEST[name]
    result = redactor.scrub(_body(name))
    assert _leaked(entry["markers"] + entry.get("secrets", []), result.text) == []
    assert len(result.text) <= MAX_LENGTH


@pytest.mark.parametrize("name", CORPUS_FILES)
def test_scrub_counts_what_it_cut_from_a_corpus_body(redactor: Redactor, name: str) -> None:
    """Each leaking body is reported under at least one known redaction kind, each once."""
    kinds = redactor.scrub(_body(name)).kinds
    assert kinds
    assert set(kinds) <= set(KINDS)
    assert len(set(kinds)) == len(kinds)
    assert list(kinds) == sorted(kinds, key=KINDS.index)


@pytest.mark.parametrize("name", [n for n in CORPUS_FILES if "keep" in MANIFEST[n]])
def test_scrub_keeps_the_useful_sentence_of_a_corpus_body(redactor: Redactor, name: str) -> None:
    """Where the upstream said something useful around the leak, the agent still reads it."""
    assert MANIFEST[name]["keep"] in redactor.scrub(_body(name)).text


@pytest.mark.parametrize("name", [n for n in CORPUS_FILES if "secrets" in MANIFEST[n]])
def test_mask_masks_every_secret_of_a_corpus_body(redactor: Redactor, name: str) -> None:
    """The operator log never holds a credential, whatever family it belongs to."""
    result = redactor.mask(_body(name))
    assert _leaked(MANIFEST[name]["secrets"], result.text) == []
    assert result.kinds


@pytest.mark.parametrize("name", [n for n in CORPUS_FILES if "frame" in MANIFEST[n]])
def test_mask_keeps_the_stack_frames_of_a_corpus_body(redactor: Redactor, name: str) -> None:
    """The operator needs the trace: mask leaves stack frames as they were."""
    assert MANIFEST[name]["frame"] in redactor.mask(_body(name)).text


@pytest.mark.parametrize("name", CORPUS_FILES)
def test_scrub_is_idempotent_on_a_corpus_body(redactor: Redactor, name: str) -> None:
    """Scrubbing scrubbed text changes nothing (the pipeline may scrub a value twice)."""
    once = redactor.scrub(_body(name)).text
    assert redactor.scrub(once).text == once


# --- examples -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "Field qty must be greater than 0.",
        "Send POST /api/orders again.",
        "Change /qty to a positive integer.",
        "Call POST /invoices/42/finalize first.",
        "Rate limit exceeded; retry after 30 seconds.",
        'Invalid value for field "currency": expected one of USD, EUR.',
        "password: must be at least 8 characters",
        "Token expired",
        "Unknown field orders.items.qty",
        "/data/attributes/email",
        "Errors:\n1: qty must be positive\n2: sku is required",
        "/items/0/qty",
        "The requested resource /api/v1/users/17 was not found.",
        "Select a value from the list.",
        "Update the order before you delete it from the cart.",
        "user john.doe@example.com already exists",
        "See https://docs.stripe.com/error-codes/card-declined for details.",
        "VALIDATION_FAILED",
        "",
    ],
)
def test_scrub_leaves_clean_text_alone(redactor: Redactor, text: str) -> None:
    """Messages, hints and request paths that hold nothing internal pass unchanged."""
    assert redactor.scrub(text) == Scrubbed(text, ())


@pytest.mark.parametrize(
    ("text", "expected", "kind"),
    [
        (
            "Order 42 could not be saved: could not connect to server at 10.0.3.7:5432 "
            "(psycopg2.OperationalError)",
            "Order 42 could not be saved.",
            "db_error",
        ),
        (
            "Payment failed; nested exception is org.hibernate.exception.LockAcquisitionException",
            "Payment failed.",
            "exception_chain",
        ),
        (
            "Could not reach the ledger at ledger-7.prod.internal:8443",
            "Could not reach the ledger at an internal host",
            "internal_host",
        ),
        (
            "Report not found: /srv/reports/2024/q1.pdf",
            "Report not found: an internal path",
            "file_path",
        ),
        (
            "Invalid API key sk_live_4eC39HqLyjWDarjtT1zdp7dc provided",
            "Invalid API key [redacted] provided",
            "secret",
        ),
        (
            "java.lang.IllegalArgumentException: quantity must be positive",
            "quantity must be positive",
            "exception_class",
        ),
        (
            "Duplicate order: SQLSTATE[23000]: Integrity constraint violation",
            "Duplicate order.",
            "db_error",
        ),
        (
            "Lookup failed: SELECT id, name FROM customers WHERE email = 'a@b.co'",
            "Lookup failed.",
            "sql",
        ),
    ],
)
def test_scrub_keeps_the_sentence_and_cuts_the_internals(
    redactor: Redactor, text: str, expected: str, kind: str
) -> None:
    """A useful sentence wrapped in internals keeps the sentence; the internals go or are named."""
    result = redactor.scrub(text)
    assert result.text == expected
    assert kind in result.kinds


def test_scrub_replaces_a_debug_page_by_a_neutral_sentence(redactor: Redactor) -> None:
    """A framework debug page is never passed on, not even in part."""
    page = _body("python_django_technical_500.html")
    assert redactor.scrub(page) == Scrubbed(NEUTRAL, redactor.scrub(page).kinds)
    assert "debug_page" in redactor.scrub(page).kinds


def test_scrub_caps_long_text_at_a_sentence_boundary(redactor: Redactor) -> None:
    """Long upstream prose is cut to the last whole sentence that fits."""
    text = " ".join(f"Item {i} was rejected by the warehouse." for i in range(40))
    result = redactor.scrub(text).text
    assert len(result) <= MAX_LENGTH
    assert result.endswith("warehouse.")
    assert text.startswith(result)


def test_mask_keeps_everything_but_secrets(redactor: Redactor) -> None:
    """Hosts, paths and frames stay in the operator log; the password in the URL does not."""
    text = (
        "Caused by: java.sql.SQLException: cannot connect to "
        "postgres://app:hunter2pw@db-1.internal:5432/orders\n"
        "\tat com.acme.Db.open(Db.java:12)"
    )
    result = redactor.mask(text)
    assert result.text == text.replace("app:hunter2pw", "[masked]")
    assert result.kinds == ("credential_url",)


# --- families, generated ------------------------------------------------------------------------

_ALNUM = string.ascii_letters + string.digits
markers = st.builds(
    lambda tail: "zq" + tail,
    st.text(alphabet=string.ascii_lowercase + string.digits, min_size=6, max_size=10),
)
pads = st.text(alphabet=_ALNUM, min_size=24, max_size=32)
upper_pads = st.text(alphabet=string.ascii_uppercase + string.digits, min_size=16, max_size=16)

_NOUNS = ["Order", "Invoice", "Customer", "Payment", "Shipment", "Account", "Cart", "Refund"]
_VERBS = ["saved", "created", "updated", "charged", "shipped", "found", "cancelled", "loaded"]
sentences = st.builds(
    lambda noun, number, verb: f"{noun} {number} could not be {verb}",
    st.sampled_from(_NOUNS),
    st.integers(min_value=1, max_value=99_999),
    st.sampled_from(_VERBS),
)


def _jwt(marker: str, pad: str) -> str:
    header = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').decode().rstrip("=")
    return f"{header}.{marker}{pad}.{pad[::-1]}"


def _random_token(seed: str) -> str:
    """A key of no known format: only its randomness gives it away."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(seed.encode()).digest()).decode()
    return digest.rstrip("=") + "Q7z9"


_SECRET_FORMS = [
    lambda m, p, u: f"sk_live_{m}{p}",
    lambda m, p, u: f"rk_test_{m}{p}",
    lambda m, p, u: f"ghp_{m}{p}",
    lambda m, p, u: f"xoxb-123456789012-{m}-{p}",
    lambda m, p, u: f"AIza{(m + p + p)[:35]}",
    lambda m, p, u: f"AKIA{(m.upper() + u)[:16]}",
    lambda m, p, u: _jwt(m, p),
    lambda m, p, u: f"Bearer {m}{p}",
    lambda m, p, u: f"Authorization: Basic {m}{p}==",
    lambda m, p, u: f"Cookie: session={m}{p}; theme=dark",
    lambda m, p, u: f'"authorization": "Token {m}{p}"',
    lambda m, p, u: f"https://deploy:{m}@git.example.com/acme/repo.git",
    lambda m, p, u: f"https://{m}@hooks.example.com/x",
    lambda m, p, u: f"https://api.example.com/v1/cb?api_key={m}&page=2",
    lambda m, p, u: f"https://api.example.com/v1/cb?access_token={m}",
    lambda m, p, u: f"https://api.example.com/v1/cb?client_secret={m}",
    lambda m, p, u: f"https://api.example.com/v1/cb?x=1&token={m}",
    lambda m, p, u: f"password={m}",
    lambda m, p, u: f"secret: {m}",
    lambda m, p, u: f"'db_password': '{m}'",
    lambda m, p, u: f"postgres://orders:{m}@db.example.com:5432/orders",
    lambda m, p, u: f"mongodb+srv://svc:{m}@cluster0.example.mongodb.net/app",
    lambda m, p, u: f"jdbc:oracle:thin:scott/{m}@db.example.com:1521:ORCL",
    lambda m, p, u: f"https://hooks.slack.com/services/T0001/B0002/{m}{p}",
    lambda m, p, u: f"Server=tcp:sql.example.net,1433;Database=app;User Id=sa;Password={m};",
    lambda m, p, u: f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={m}{p}==;",
    lambda m, p, u: (
        f"-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA{m}{p}\n{p}{p}\n"
        "-----END RSA PRIVATE KEY-----"
    ),
    lambda m, p, u: f"AWS_SECRET_ACCESS_KEY={m}/{p}",
    lambda m, p, u: f"X-Api-Key: {m}{p}",
    lambda m, p, u: f"{m}{_random_token(m)}",
]
secrets_ = st.builds(
    lambda form, m, p, u: (form(m, p, u), m),
    st.sampled_from(_SECRET_FORMS),
    markers,
    pads,
    upper_pads,
)


def _cap(marker: str) -> str:
    return marker[0].upper() + marker[1:]


_FRAME_FORMS = [
    lambda m: (
        f"java.lang.IllegalStateException: boom\n\tat com.acme.{_cap(m)}Service.run("
        f"{_cap(m)}Service.java:42)\n\tat java.base/java.lang.Thread.run(Thread.java:1583)"
    ),
    lambda m: f"Caused by: org.acme.{_cap(m)}Exception: refused\n\t... 12 more",
    lambda m: (
        f'Traceback (most recent call last):\n  File "/srv/app/{m}/views.py", line 12, in '
        f"post\n    {m}.save()\nValueError: bad"
    ),
    lambda m: (
        f"TypeError: x is undefined\n    at {_cap(m)}.handle (/usr/src/app/{m}/index.js:10:5)"
        f"\n    at process.processTicksAndRejections (node:internal/process/task_queues:95:5)"
    ),
    lambda m: (
        f"System.NullReferenceException: Object reference not set.\n   at Acme.{_cap(m)}."
        f"Controllers.Run() in C:\\src\\{m}\\Run.cs:line 42"
    ),
    lambda m: (
        f"panic: runtime error: index out of range\n\ngoroutine 1 [running]:\n"
        f"github.com/acme/{m}/pkg.(*Server).Handle(0xc000123456)\n\t/build/{m}/server.go:88 +0x1a5"
    ),
    lambda m: f"NoMethodError: undefined method\n/srv/{m}/app/models/order.rb:42:in `save'",
    lambda m: (
        f"PHP Fatal error:  Uncaught Exception: boom in /var/www/{m}/src/Db.php:23\n"
        f"Stack trace:\n#0 /var/www/{m}/src/Db.php(23): Acme\\Db->open()\n#1 {{main}}"
    ),
    lambda m: f"thread 'main' panicked at src/{m}/main.rs:10:5:\ncalled `Option::unwrap()`",
    lambda m: f"com.acme.{_cap(m)}Exception: it failed",
    lambda m: f"failed with org.acme.{_cap(m)}Error",
    lambda m: f"Acme\\Billing\\{_cap(m)}Gateway failed",
    lambda m: f"ActiveRecord::{_cap(m)}NotFound raised",
    lambda m: f"{m}::handlers::create_order failed",
    lambda m: f"Illegal state: {_cap(m)}Exception occurred",
    lambda m: f"failed to lazily initialize a collection of role: com.acme.{m}.items",
    lambda m: f"KeyError: '{m}'",
    lambda m: f"TypeError: Cannot read properties of undefined (reading '{m}')",
]
frames = st.builds(lambda form, m: (form(m), m), st.sampled_from(_FRAME_FORMS), markers)

_HOST_FORMS = [
    lambda m: f"db-{m}.internal",
    lambda m: f"{m}.orders.svc.cluster.local",
    lambda m: f"{m}.corp:8080",
    lambda m: f"cache.{m}.lan",
    lambda m: f"{m}.local",
    lambda m: f"http://{m}-svc:8080/api/x",
    lambda m: f"https://{m}/admin",
    lambda m: f"redis-{m}:6379",
    lambda m: f"ops@{m}.intranet",
    lambda m: f"ip-10-0-1-2.{m}.compute.internal",
    lambda m: f"getaddrinfo ENOTFOUND {m}",
    lambda m: f"dial tcp: lookup {m} on 10.96.0.10:53: no such host",
    lambda m: f"java.net.UnknownHostException: {m}",
    lambda m: f"{m}: Name or service not known",
    lambda m: f"HTTPConnectionPool(host='{m}', port=8000): Max retries exceeded",
    lambda m: f"Host: {m}-api",
    lambda m: f"db.{m}.eu-west-1.rds.amazonaws.com",
]
hosts = st.builds(lambda form, m: (form(m), m), st.sampled_from(_HOST_FORMS), markers)

_PATH_FORMS = [
    lambda m: f"/srv/app/{m}/config.yml",
    lambda m: f"/home/deploy/{m}/current",
    lambda m: f"/opt/{m}/bin/run",
    lambda m: f"/var/log/{m}.log",
    lambda m: f"/usr/lib/python3/site-packages/{m}/x.py",
    lambda m: f"C:\\inetpub\\wwwroot\\{m}\\web.config",
    lambda m: f"D:/builds/{m}/out",
    lambda m: f"\\\\fs01\\share\\{m}\\a.txt",
    lambda m: f"~/{m}/.env",
    lambda m: f"app/controllers/{m}_controller.rb:12",
    lambda m: f"{m}.py:88",
    lambda m: f"/api/{m}/node_modules/x/index.js",
    lambda m: f"file:///etc/{m}",
]
paths = st.builds(lambda form, m: (form(m), m), st.sampled_from(_PATH_FORMS), markers)

_SQL_FORMS = [
    lambda m: f"SELECT id, total FROM {m}_orders WHERE id = 1",
    lambda m: f"select * from {m}",
    lambda m: f"INSERT INTO {m}_t (a, b) VALUES (1, 2)",
    lambda m: f"UPDATE {m}_stock SET qty = qty - 1 WHERE sku = 'A'",
    lambda m: f"DELETE FROM {m}_sessions WHERE expires < now()",
    lambda m: f'ERROR:  relation "{m}" does not exist',
    lambda m: f'ERROR: duplicate key value violates unique constraint "{m}_key"',
    lambda m: f"SQLSTATE[42S02]: Base table or view not found: 1146 Table 'shop.{m}'",
    lambda m: f"ORA-00942: table or view does not exist ({m}_OWNER.LEDGER)",
    lambda m: f"psycopg2.errors.UndefinedTable: relation {m}",
    lambda m: f"(1062, \"Duplicate entry '{m}' for key 'PRIMARY'\")",
    lambda m: f"no such table: {m}_sessions",
    lambda m: f"Invalid object name 'dbo.{m}'",
    lambda m: f"E11000 duplicate key error collection: {m}.users",
]
sqls = st.builds(lambda form, m: (form(m), m), st.sampled_from(_SQL_FORMS), markers)

private_ipv4 = st.one_of(
    st.tuples(st.just(10), st.integers(0, 255), st.integers(0, 255), st.integers(1, 254)),
    st.tuples(st.just(172), st.integers(16, 31), st.integers(0, 255), st.integers(1, 254)),
    st.tuples(st.just(192), st.just(168), st.integers(0, 255), st.integers(1, 254)),
    st.tuples(st.just(127), st.integers(0, 255), st.integers(0, 255), st.integers(1, 254)),
    st.tuples(st.just(169), st.just(254), st.integers(0, 255), st.integers(1, 254)),
).map(lambda parts: ".".join(str(p) for p in parts))
private_ipv6 = st.builds(
    lambda prefix, a, b: f"{prefix}:{a:x}:{b:x}::{(a ^ b) or 1:x}",
    st.sampled_from(["fd12", "fc00", "fe80", "fd00:ab"]),
    st.integers(1, 0xFFFF),
    st.integers(1, 0xFFFF),
)
addresses = st.one_of(
    private_ipv4.map(lambda ip: (ip, ip)),
    private_ipv4.map(lambda ip: (f"{ip}:5432", ip)),
    private_ipv6.map(lambda ip: (ip, ip)),
    private_ipv6.map(lambda ip: (f"[{ip}]:8443", ip)),
)

leaks = st.one_of(secrets_, frames, hosts, paths, sqls, addresses)
separators = st.sampled_from([": ", " - ", " (", "; ", "\n", " at ", ", ", " "])


@PROPERTY
@given(sentence=sentences, separator=separators, leak=leaks, trailer=sentences)
def test_scrub_never_leaks_a_generated_leak(
    sentence: str, separator: str, leak: tuple[str, str], trailer: str
) -> None:
    """Whatever the family and wrapping, the planted marker never reaches the agent."""
    text, marker = leak
    result = Redactor().scrub(f"{sentence}{separator}{text}{separator}{trailer}.")
    assert marker.lower() not in result.text.lower()
    assert result.kinds
    assert len(result.text) <= MAX_LENGTH


@PROPERTY
@given(sentence=sentences, leaks_=st.lists(leaks, min_size=2, max_size=5))
def test_scrub_never_leaks_several_generated_leaks(
    sentence: str, leaks_: list[tuple[str, str]]
) -> None:
    """Several leaks of several families in one body: none of them comes out."""
    body = sentence + ": " + "\n".join(text for text, _ in leaks_)
    result = Redactor().scrub(body).text.lower()
    assert [m for _, m in leaks_ if m.lower() in result] == []


@PROPERTY
@given(sentence=sentences, leak=st.one_of(secrets_, hosts, sqls, addresses, paths))
def test_scrub_keeps_the_sentence_before_a_leak(sentence: str, leak: tuple[str, str]) -> None:
    """ "<useful sentence>: <internals>" keeps the useful sentence."""
    text, _ = leak
    assert sentence in Redactor().scrub(f"{sentence}: {text}").text


@PROPERTY
@given(leak=leaks, sentence=sentences)
def test_scrub_is_idempotent(leak: tuple[str, str], sentence: str) -> None:
    """scrub(scrub(x)) == scrub(x) for text made of leaks and prose."""
    redactor = Redactor()
    once = redactor.scrub(f"{sentence}: {leak[0]}").text
    assert redactor.scrub(once).text == once


@PROPERTY
@given(text=st.text(max_size=2000))
def test_scrub_and_mask_accept_any_unicode(text: str) -> None:
    """Arbitrary text never crashes either function; scrub stays short and idempotent."""
    redactor = Redactor()
    once = redactor.scrub(text)
    assert len(once.text) <= MAX_LENGTH or once.text == text[:MAX_LENGTH]
    assert redactor.scrub(once.text).text == once.text
    assert isinstance(redactor.mask(text).text, str)


@PROPERTY
@given(secret=secrets_, frame=frames)
def test_mask_masks_generated_secrets_and_keeps_frames(
    secret: tuple[str, str], frame: tuple[str, str]
) -> None:
    """The operator log: the secret is gone, the trace (with its marker) is intact."""
    frame_text, _ = frame
    result = Redactor().mask(f"{frame_text}\nrequest: {secret[0]}")
    assert result.text.startswith(frame_text + "\n")
    assert secret[1].lower() not in result.text[len(frame_text) :].lower()


# --- hostile input ------------------------------------------------------------------------------

_MB = 1_000_000
_ADVERSARIAL = {
    "one_letter": "a" * _MB,
    "backslashes": "\\" * _MB,
    "slashes": "/usr" * (_MB // 4),
    "dots": "a.b." * (_MB // 4),
    "ip_like": "1.1.1." * (_MB // 6),
    "colons": "f:" * (_MB // 2),
    "tags": "<a" * (_MB // 2),
    "key_headers": "-----BEGIN RSA PRIVATE KEY-----" * (_MB // 31),
    "sql_words": "SELECT " * (_MB // 7),
    "where_clauses": "where a = " * (_MB // 10),
    "frames": "\tat a.b(" * (_MB // 8),
    "key_values": "token: " * (_MB // 7),
    "table_cells": "</td><td>" * (_MB // 9),
    "exceptions": "AException " * (_MB // 11),
    "jwt_start": "eyJ" + "a" * _MB,
    "urls": "http://" * (_MB // 7),
    "emails": "user@" * (_MB // 5),
}


def _run_with_limit(function: Any, argument: str, seconds: float) -> Scrubbed:
    """Run in a thread so that a regex gone quadratic fails the test instead of hanging it."""
    outcome: list[Scrubbed] = []
    worker = threading.Thread(target=lambda: outcome.append(function(argument)), daemon=True)
    worker.start()
    worker.join(seconds)
    assert outcome, f"did not finish within {seconds} s"
    return outcome[0]


@pytest.mark.parametrize("shape", sorted(_ADVERSARIAL))
def test_a_megabyte_of_hostile_input_is_handled(redactor: Redactor, shape: str) -> None:
    """1 MB shaped against the patterns, with a secret at the end: handled, and still correct."""
    secret = "sk_live_ZqAdversarial0123456789"
    body = _ADVERSARIAL[shape] + "\nkey: " + secret
    scrubbed = _run_with_limit(redactor.scrub, body, 60)
    masked = _run_with_limit(redactor.mask, body, 60)
    assert secret not in scrubbed.text
    assert len(scrubbed.text) <= MAX_LENGTH
    assert secret not in masked.text
    assert "[masked]" in masked.text


# --- headers ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "internal"),
    [
        ("Server", True),
        ("server", True),
        ("X-Powered-By", True),
        ("X-AspNet-Version", True),
        ("X-AspNetMvc-Version", True),
        ("X-Runtime", True),
        ("X-Debug-Token", True),
        ("X-Debug-Token-Link", True),
        ("X-Backend-Server", True),
        ("X-Upstream-Addr", True),
        ("X-Served-By", True),
        ("Via", True),
        ("X-Varnish", True),
        ("X-Cache", True),
        ("X-Cache-Hits", True),
        ("X-Amzn-Trace-Id", True),
        ("X-Request-Start", True),
        ("X-Envoy-Upstream-Service-Time", True),
        ("X-Kong-Upstream-Latency", True),
        ("X-Kong-Proxy-Latency", True),
        ("X-Generator", True),
        ("X-Drupal-Cache", True),
        ("X-Litespeed-Cache", True),
        ("X-Application-Context", True),
        ("Server-Timing", True),
        ("Content-Type", False),
        ("Retry-After", False),
        ("WWW-Authenticate", False),
        ("Allow", False),
        ("RateLimit-Remaining", False),
        ("X-RateLimit-Reset", False),
        ("X-Request-ID", False),
        ("Location", False),
        ("ETag", False),
    ],
)
def test_is_internal_header(name: str, internal: bool) -> None:
    """Headers naming upstream software, topology or timings are internal; the useful ones not."""
    assert is_internal_header(name) is internal


@pytest.mark.parametrize(
    ("pattern", "text"),
    [
        (r"(?<![\w+/-])[A-Za-z0-9_-]{24,512}+={0,2}(?![\w+/-])", "key AbCdEfGhIjKlMnOpQrStUvWx12"),
        (r"(?i)\bpässwort\s*=\s*(\S+)", "PÄSSWORT = geheim"),
        (r"(?i)token[\w.-]{0,40}+\s*[:=]\s*(\S{1,500}+)", "token_ñame: v4lue"),
        (r"end of line$", "end of line\n"),
        (r"\u2014\s+at\b", "x \u2014  at y"),
        (r"(?:[^-]|-(?!----END))*+-----END", "abc-----END"),
        (r"(?>ab|a)c", "abc"),
        (r"id=\d{3}", "id=\u0661\u0662\u0663"),  # Arabic-Indic digits are \d to re
        (r"a\sb", "a\u2003b"),  # an em space is \s
        (r"x[^\s]y", "x\u00f1y"),  # a negated class keeps what is past ASCII
        (r"x[^\w]y", "x\u2014y"),
        (r"x[^\d]y", "x\u00bdy"),  # ½ is a number but not a decimal digit
        (r"x\Wy", "x\u3000y"),
        (r"x\Sy", "x\u0131y"),
        (r"(?i)k\w+", "\u212aelvin"),  # the Kelvin sign folds to k
    ],
)
def test_re2_gate_never_rejects_what_the_pattern_matches(pattern: str, text: str) -> None:
    """A gate may say "maybe" too often, never "no" when Python's re would match."""
    compiled = re.compile(pattern)
    gated = gated_module.GatedPattern(compiled)
    assert compiled.search(text) is not None
    assert gated.search(text) is not None
    assert gated.sub("X", text) == compiled.sub("X", text)


def test_scrub_cache_stays_bounded_and_consistent() -> None:
    """Repeated short texts hit the cache with the same result; the cache never outgrows its cap."""
    redactor = Redactor()
    first = redactor.scrub("connect to db-7.internal failed")
    assert redactor.scrub("connect to db-7.internal failed") is first
    for i in range(redact_module.CACHE_SIZE + 50):
        redactor.scrub(f"field {i} is invalid")
    assert len(redactor._cache) == redact_module.CACHE_SIZE
    assert "db-7.internal" not in redactor.scrub("connect to db-7.internal failed").text


def test_mask_remembers_bodies_within_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """The log's masked body is remembered whole (issue 29: an upstream repeats its error bodies,
    and masking one cost 130-330 k instructions): the same answer, kinds and all, the second
    time; the bodies and their masked copies held never pass ``MASKED_CHARS`` characters."""
    monkeypatch.setattr(redact_module, "MASKED_CHARS", 400)
    redactor = Redactor()
    body = "login failed: password=Hunter2hunter2 for user bob " * 2
    first = redactor.mask(body)
    assert "Hunter2" not in first.text
    assert first.kinds == ("secret",)
    assert redactor.mask(body) is first
    for i in range(20):
        assert redactor.mask(f"{i} token={i}abcdefghijk").text == f"{i} token=[masked]"
    held = redactor._masked
    assert held.chars <= 400
    assert held.chars == sum(len(k) + len(v.text) for k, v in held.entries.items())
    assert body not in held.entries  # the oldest went first
    assert redactor.mask(body) == first
    assert redactor.mask("x" * 500).text == "x" * 500  # larger than the bound: never kept
    assert "x" * 500 not in held.entries


_TOKEN = re.compile(r"(?<![\w+/-])[A-Za-z0-9_-]{24,512}+={0,2}(?![\w+/-])")
_TOKENISH = st.text(alphabet="aZ9_-=+/ .é\n", max_size=120) | st.builds(
    lambda a, b, c: a + b + c,
    st.text(alphabet=" =+/é-", max_size=3),
    st.text(alphabet="aZ9_-", min_size=20, max_size=40),
    st.text(alphabet=" =+/é-a", max_size=4),
)


@settings(max_examples=400, deadline=None)
@given(text=st.lists(_TOKENISH, max_size=6).map("".join))
def test_anchored_pattern_matches_exactly_like_re(text: str) -> None:
    """Trying ``re`` only where RE2 finds a candidate start changes no match."""
    anchored = gated_module.AnchoredPattern(_TOKEN, r"[A-Za-z0-9_-]{24,}")
    assert anchored.sub(lambda m: f"<{m.group(0)}>", text) == _TOKEN.sub(
        lambda m: f"<{m.group(0)}>", text
    )
    assert anchored.findall(text) == _TOKEN.findall(text)


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet="abkeytoPWD=:_ ", max_size=1200))
def test_trigger_set_agrees_with_substring_checks(text: str) -> None:
    """Long texts take the RE2 set, short ones ``in``; both say the same."""
    lists = [(), ("key",), ("pwd", "token"), ("=",), ("zzz",)]
    lowered = text.lower()
    expected = [not t or any(x in lowered for x in t) for t in lists]
    assert regex.TriggerSet(lists).present(lowered) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Caused by: org.acme.ZqsecretException: refused",
        "InvalidTokenError: the token has expired",
        "PasswordPolicyException: must contain a digit",
    ],
)
def test_exception_names_are_not_secret_keys(text: str) -> None:
    """A class name containing "token" or "secret" is not a ``key: value`` pair to mask."""
    assert Redactor().mask(text).text == text


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"error": {"message": "  "}, "detail": "the detail"}, "the detail"),
        ({"Message": "", "errors": [{"msg": "first"}]}, "first"),
        ({"errors": ["", "  ", "third", "fourth"]}, "  "),
        ([[[[[["too deep"]]]]]], None),
        ({"message": 5, "detail": None}, None),
        ([1, {"title": "t"}], "t"),
    ],
)
def test_message_of_finds_the_first_message_like_string(document: Any, message: Any) -> None:
    """A blank string under a message key is skipped; a list's items count as they are."""
    assert markup.message_of(document) == message
