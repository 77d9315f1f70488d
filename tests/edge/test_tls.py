"""TLS both ways: mend in front of real TLS upstreams, and real HTTPS clients to mend's ports.

Certificates come from trustme: one CA, and leaves for 127.0.0.1/localhost, an expired one, one
for another name, and a client certificate. Upstreams are aiohttp servers with an SSL context,
except where a client certificate is required: there a blocking OpenSSL server, which (as nginx,
Envoy and Go do) sends its alert before it closes; aiohttp's own server closes silently.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from aiohttp import web
from aiohttp.test_utils import TestServer
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from proxy.config.certificates import check_files
from proxy.config.route import Route
from proxy.config.settings import Settings
from proxy.config.sources import load_settings
from proxy.config.yamlfile import RuleError
from tests.conftest import Mend, StartMend
from tests.tools.test_cli_run import free_port

ROOT = Path(__file__).resolve().parents[2]
PAST = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)


# --- certificates -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Leaf:
    cert: Path  # the certificate chain, PEM
    key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        return context


@dataclass(frozen=True)
class PKI:
    ca: trustme.CA
    ca_file: Path
    server: Leaf  # 127.0.0.1 and localhost
    expired: Leaf
    wrong_name: Leaf  # wrong.example only
    client: Leaf  # an agent's client certificate, for mutual TLS

    def trust(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca_file)


def issue(ca: trustme.CA, directory: Path, name: str, *identities: str, **kw: Any) -> Leaf:
    leaf = ca.issue_cert(*identities, **kw)
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    cert.write_bytes(b"".join(pem.bytes() for pem in leaf.cert_chain_pems))
    leaf.private_key_pem.write_to_path(str(key))
    return Leaf(cert, key)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    directory = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    return PKI(
        ca=ca,
        ca_file=directory / "ca.pem",
        server=issue(ca, directory, "server", "127.0.0.1", "localhost"),
        expired=issue(
            ca,
            directory,
            "expired",
            "127.0.0.1",
            not_before=PAST.replace(year=2019),
            not_after=PAST,
        ),
        wrong_name=issue(ca, directory, "wrong", "wrong.example"),
        client=issue(ca, directory, "client", "agent.example"),
    )


# --- TLS upstreams ------------------------------------------------------------------------------


async def ok(_: web.Request) -> web.Response:
    return web.json_response({"ok": True})


@pytest.fixture
async def tls_upstream(aiohttp_server: Any) -> Any:
    """Start an aiohttp upstream serving ``GET /ok`` with ``leaf``'s certificate."""

    async def start(leaf: Leaf) -> TestServer:
        app = web.Application()
        app.router.add_get("/ok", ok)
        server: TestServer = await aiohttp_server(app, ssl=leaf.server_context())
        return server

    return start


class RequiringClientCertificate:
    """An HTTPS upstream on blocking sockets in a thread that requires a client certificate.

    A refused handshake sends OpenSSL's alert, then the socket is half-closed and drained before
    it is closed (a lingering close, as nginx does), so the alert reaches mend instead of a reset.
    """

    def __init__(self, pki: PKI) -> None:
        self.context = pki.server.server_context()
        self.context.load_verify_locations(pki.ca_file)
        self.context.verify_mode = ssl.CERT_REQUIRED
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"https://127.0.0.1:{self.listener.getsockname()[1]}"
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        tls = self.context.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        with tls:
            tls.settimeout(5)
            try:
                tls.do_handshake()
            except (ssl.SSLError, OSError):
                tls.shutdown(socket.SHUT_WR)
                while tls.recv(4096):
                    pass
                return
            head = b""
            while b"\r\n\r\n" not in head and (chunk := tls.recv(4096)):
                head += chunk
            tls.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n"
                b'Connection: close\r\n\r\n{"ok":true}'
            )

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def mtls_upstream(pki: PKI) -> Iterator[RequiringClientCertificate]:
    server = RequiringClientCertificate(pki)
    yield server
    server.close()


def tls_request_line(mend: Mend) -> dict[str, Any]:
    return next(
        line
        for line in mend.log_lines()
        if line.get("event") == "request" and line.get("code") == "UPSTREAM_TLS_ERROR"
    )


async def tls_failure(mend: Mend) -> tuple[dict[str, Any], str]:
    """GET /ok through mend: the envelope (as JSON) and the raw body."""
    response = await mend.client.get("/ok")
    body = await response.text()
    assert response.status == 502
    assert response.headers["X-Error-Code"] == "UPSTREAM_TLS_ERROR"
    return json.loads(body)["error"], body


#: What the agent must never see of a certificate problem.
CERTIFICATE_TEXT = ("expired", "issuer", "mismatch", "CERTIFICATE_VERIFY", "trustme", "SSL", "x509")


# --- to upstreams -------------------------------------------------------------------------------


async def test_trusted_upstream_passes_through(
    pki: PKI, tls_upstream: Any, start_mend: StartMend
) -> None:
    """With the upstream's CA as ``ca_file`` the success passes through untouched."""
    upstream = await tls_upstream(pki.server)
    mend = await start_mend(upstream, route={"tls": {"ca_file": pki.ca_file}})
    response = await mend.client.get("/ok")
    assert response.status == 200
    assert await response.json() == {"ok": True}


async def test_untrusted_upstream_is_upstream_tls_error(
    pki: PKI, tls_upstream: Any, start_mend: StartMend
) -> None:
    """A certificate from a CA mend does not trust is UPSTREAM_TLS_ERROR: 502, not retryable,
    escalate, no Retry-After; the reason goes to the operator's log line only, and the failure
    is counted as one of the upstream's."""
    upstream = await tls_upstream(pki.server)
    mend = await start_mend(upstream)  # the system's CAs: trustme's is not among them
    response = await mend.client.get("/ok")
    error = (await response.json())["error"]
    assert response.status == 502
    assert "Retry-After" not in response.headers
    assert error["code"] == "UPSTREAM_TLS_ERROR"
    assert (error["retryable"], error["action"], error["severity"]) == (False, "escalate", "fatal")
    assert error["category"] == "dependency"
    assert error["upstream_status"] is None
    assert error["applied"] == "no"  # the handshake failed: the request was never sent
    assert "unknown CA" in tls_request_line(mend)["failure"]
    assert mend.metric("mend_upstream_failures_total", route="default", reason="tls_error") == 1


async def test_expired_certificate_says_expired_in_the_log_only(
    pki: PKI, tls_upstream: Any, start_mend: StartMend
) -> None:
    """An expired upstream certificate: "expired" in the log line, no certificate text sent."""
    upstream = await tls_upstream(pki.expired)
    mend = await start_mend(upstream, route={"tls": {"ca_file": pki.ca_file}})
    error, body = await tls_failure(mend)
    assert error["action"] == "escalate"
    assert "expired" in tls_request_line(mend)["failure"]
    for text in CERTIFICATE_TEXT:
        assert text.lower() not in body.lower()


async def test_wrong_name_is_a_name_mismatch(
    pki: PKI, tls_upstream: Any, start_mend: StartMend
) -> None:
    """A certificate for another name than the upstream's host is a name mismatch."""
    upstream = await tls_upstream(pki.wrong_name)
    mend = await start_mend(upstream, route={"tls": {"ca_file": pki.ca_file}})
    await tls_failure(mend)
    assert "name mismatch" in tls_request_line(mend)["failure"]


async def test_server_name_checks_that_name_instead_of_the_host(
    pki: PKI, tls_upstream: Any, start_mend: StartMend
) -> None:
    """``server_name`` is the name sent in SNI and checked: the same upstream now passes."""
    upstream = await tls_upstream(pki.wrong_name)
    tls = {"ca_file": pki.ca_file, "server_name": "wrong.example"}
    mend = await start_mend(upstream, route={"tls": tls})
    response = await mend.client.get("/ok")
    assert response.status == 200
    assert await response.json() == {"ok": True}


async def test_client_certificate_opens_a_mutual_tls_upstream(
    pki: PKI, mtls_upstream: RequiringClientCertificate, start_mend: StartMend
) -> None:
    """``cert_file``/``key_file``: mend presents its client certificate and gets through."""
    tls = {"ca_file": pki.ca_file, "cert_file": pki.client.cert, "key_file": pki.client.key}
    mend = await start_mend(mtls_upstream.url, route={"tls": tls})
    response = await mend.client.get("/ok")
    assert response.status == 200
    assert await response.json() == {"ok": True}


async def test_missing_client_certificate_is_upstream_tls_error(
    pki: PKI, mtls_upstream: RequiringClientCertificate, start_mend: StartMend
) -> None:
    """Without a client certificate the upstream's refusal (a TLS 1.3 alert after mend's side of
    the handshake) is UPSTREAM_TLS_ERROR, "client certificate required" in the log."""
    mend = await start_mend(mtls_upstream.url, route={"tls": {"ca_file": pki.ca_file}})
    error, _ = await tls_failure(mend)
    assert (error["retryable"], error["action"]) == (False, "escalate")
    assert "client certificate required" in tls_request_line(mend)["failure"]


async def test_verify_false_accepts_any_certificate_and_warns_at_start(
    pki: PKI, tls_upstream: Any, start_mend: StartMend
) -> None:
    """``verify: false`` gets through an untrusted, expired certificate, and start-up logs a
    warning naming the route."""
    upstream = await tls_upstream(pki.expired)
    mend = await start_mend(upstream, route={"tls": {"verify": False}})
    warnings = [line for line in mend.log_lines() if line["level"] == "warning"]
    assert [(w["event"], w["route"]) for w in warnings] == [
        ("upstream_tls_verify_disabled", "default")
    ]
    response = await mend.client.get("/ok")
    assert response.status == 200


# --- settings -----------------------------------------------------------------------------------


def test_tls_block_needs_an_https_upstream() -> None:
    """``tls:`` on an http:// upstream is a configuration error, not silently ignored."""
    with pytest.raises(ValueError, match="https://"):
        Route(name="r", upstream="http://api.internal", tls={"ca_file": "ca.pem"})


def test_tls_block_refuses_unknown_keys() -> None:
    """A misspelt key (``ca_fle``) is an error, like everywhere in the config."""
    with pytest.raises(ValueError, match="ca_fle"):
        Route(name="r", upstream="https://api.internal", tls={"ca_fle": "ca.pem"})


def test_config_certificate_paths_are_relative_to_the_config(tmp_path: Path) -> None:
    """As rule paths are: ``tls_cert`` and a route's ``ca_file`` resolve beside the config file."""
    config = tmp_path / "mend.yaml"
    config.write_text(
        "tls_cert: certs/mend.pem\n"
        "routes:\n"
        "  - name: api\n"
        "    upstream: https://api.internal\n"
        "    tls: {ca_file: certs/ca.pem, server_name: api.internal}\n"
    )
    settings = load_settings(config)
    assert settings.tls_cert == tmp_path / "certs" / "mend.pem"
    assert settings.routes[0].tls is not None
    assert settings.routes[0].tls.ca_file == tmp_path / "certs" / "ca.pem"


def test_config_key_without_certificate_names_the_file(tmp_path: Path) -> None:
    """``tls_key`` without ``tls_cert`` is refused with the config's ``file:line``."""
    config = tmp_path / "mend.yaml"
    config.write_text("tls_key: k.pem\nroutes: [{name: a, upstream: 'http://a'}]\n")
    with pytest.raises(RuleError, match="tls_key needs tls_cert"):
        load_settings(config)


def test_settings_without_tls_serve_plain_http() -> None:
    """No certificate settings: both ports plain HTTP, as before."""
    settings = Settings(routes=(Route(name="a", upstream="http://a"),))
    assert (settings.tls_cert, settings.admin_tls_cert) == (None, None)


# --- for agents: a real mend process ------------------------------------------------------------


def run_mend(*args: str, log: Path | None = None) -> subprocess.Popen[bytes]:
    """``mend run ARGS`` (without the shipped packs: quicker to start), its log to ``log``."""
    with (log or Path(os.devnull)).open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "proxy", "run", "--no-default-packs", *args],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.PIPE,
        )


def wait_up(url: str, verify: ssl.SSLContext | bool = True, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(url, verify=verify, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError(f"{url} did not come up")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
    proc.communicate(timeout=10)  # and close its stderr pipe


@pytest.fixture(scope="module")
def upstream_url() -> Iterator[str]:
    """A plain-HTTP upstream process: ``/bytes/N`` answers N bytes, other paths aiohttp's 404."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests/data/stream_upstream.py"), str(port)]
    )
    try:
        wait_up(f"http://127.0.0.1:{port}/bytes/1")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(5)


@dataclass(frozen=True)
class HttpsMend:
    proc: subprocess.Popen[bytes]
    agent: str
    admin: str


@pytest.fixture(scope="module")
def https_mend(pki: PKI, upstream_url: str) -> Iterator[HttpsMend]:
    """mend serving agents and the admin port over HTTPS (the admin with a cert+key file)."""
    listen, admin = free_port(), free_port()
    both = pki.server.cert.parent / "server-both.pem"
    both.write_bytes(pki.server.key.read_bytes() + pki.server.cert.read_bytes())
    proc = run_mend(
        *("--upstream", upstream_url, "--listen", f"127.0.0.1:{listen}"),
        *("--admin-listen", f"127.0.0.1:{admin}"),
        *("--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key)),
        *("--admin-tls-cert", str(both)),
    )
    running = HttpsMend(proc, f"https://localhost:{listen}", f"https://127.0.0.1:{admin}")
    try:
        wait_up(f"{running.admin}/readyz", pki.trust())
        yield running
    finally:
        stop(proc)


def test_curl_reaches_the_agent_port_over_https(pki: PKI, https_mend: HttpsMend) -> None:
    """curl with ``--cacert`` verifies mend's certificate and gets the upstream's bytes."""
    result = subprocess.run(
        ["curl", "-sS", "--fail", "--cacert", str(pki.ca_file), f"{https_mend.agent}/bytes/5"],
        capture_output=True,
        check=False,
        timeout=20,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == bytes(range(5))


def test_httpx_verifies_the_agent_port(pki: PKI, https_mend: HttpsMend) -> None:
    """httpx with ``verify=`` the CA gets through; with the system's CAs it refuses mend's
    certificate (the port really is TLS, with the configured certificate)."""
    assert httpx.get(f"{https_mend.agent}/bytes/3", verify=pki.trust()).content == b"\0\1\2"
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{https_mend.agent}/bytes/3")


def test_envelope_docs_url_is_https_on_a_tls_port(pki: PKI, https_mend: HttpsMend) -> None:
    """The catalog link in an envelope uses the scheme the agent connected with."""
    response = httpx.get(f"{https_mend.agent}/missing", verify=pki.trust())
    error = response.json()["error"]
    assert response.status_code == 404
    assert error["docs_url"] == f"{https_mend.agent}/_mend/errors/{error['code']}"
    assert error["docs_url"].startswith("https://")


def test_admin_port_over_https(pki: PKI, https_mend: HttpsMend) -> None:
    """The admin port serves /healthz and /metrics over HTTPS (key and cert in one file)."""
    assert httpx.get(f"{https_mend.admin}/healthz", verify=pki.trust()).json() == {"status": "ok"}
    metrics = httpx.get(f"{https_mend.admin}/metrics", verify=pki.trust()).text
    assert "mend_requests_total" in metrics


# --- certificate rotation -----------------------------------------------------------------------


def serial(url: str, pki: PKI) -> int:
    """The serial number of the certificate a new TLS connection to ``url`` gets."""
    host, _, port = url.removeprefix("https://").rpartition(":")
    with (
        socket.create_connection((host, int(port)), timeout=5) as raw,
        pki.trust().wrap_socket(raw, server_hostname=host) as tls,
    ):
        return int(tls.getpeercert()["serialNumber"], 16)  # type: ignore[index,arg-type]


@dataclass(frozen=True)
class Rotating:
    mend: HttpsMend
    cert: Path  # the served certificate and key, which a test may replace
    key: Path
    log: Path

    def renew(self, pki: PKI) -> int:
        """Replace the files with a new certificate, as cert-manager does (written beside, then
        renamed over); its serial."""
        renewed = pki.ca.issue_cert("127.0.0.1", "localhost")
        chain = b"".join(pem.bytes() for pem in renewed.cert_chain_pems)
        for path, data in ((self.cert, chain), (self.key, renewed.private_key_pem.bytes())):
            path.with_suffix(".new").write_bytes(data)
            os.replace(path.with_suffix(".new"), path)
        return x509.load_pem_x509_certificate(chain).serial_number

    def log_lines(self, event: str) -> list[dict[str, Any]]:
        time.sleep(0.5)  # mend flushes its log lines every 0.2 s
        lines = self.log.read_text().splitlines()
        return [json.loads(line) for line in lines if f'"{event}"' in line]


@pytest.fixture
def start_rotating(pki: PKI, upstream_url: str, tmp_path: Path) -> Iterator[Any]:
    """Start mend on a copy of the server certificate, with or without its file watcher."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*, watch: bool) -> Rotating:
        cert, key = tmp_path / "mend.crt", tmp_path / "mend.key"
        shutil.copy(pki.server.cert, cert)
        shutil.copy(pki.server.key, key)
        listen, admin = free_port(), free_port()
        config = tmp_path / "mend.yaml"
        config.write_text(
            f"listen: 127.0.0.1:{listen}\nadmin_listen: 127.0.0.1:{admin}\n"
            f"watch_rules: {str(watch).lower()}\ntls_cert: mend.crt\ntls_key: mend.key\n"
            f"routes: [{{name: default, upstream: '{upstream_url}'}}]\n"
        )
        log = tmp_path / "mend.log"
        started.append(run_mend("--config", str(config), log=log))
        wait_up(f"http://127.0.0.1:{admin}/readyz")
        mend = HttpsMend(started[-1], f"https://localhost:{listen}", f"http://127.0.0.1:{admin}")
        return Rotating(mend, cert, key, log)

    yield start
    for proc in started:
        stop(proc)


def serial_after(url: str, pki: PKI, before: int, timeout: float = 20.0) -> int:
    """The serial a new connection gets, once it is not ``before`` (or ``timeout`` passed)."""
    deadline = time.monotonic() + timeout
    while (now := serial(url, pki)) == before and time.monotonic() < deadline:
        time.sleep(0.2)
    return now


def test_sighup_serves_a_renewed_certificate_without_a_restart(
    pki: PKI, start_rotating: Any
) -> None:
    """Renewed files and SIGHUP (no file watcher): a new connection gets the new certificate's
    serial, the same process still runs, and a connection opened before keeps working."""
    rotating: Rotating = start_rotating(watch=False)
    mend = rotating.mend
    before = serial(mend.agent, pki)
    with httpx.Client(verify=pki.trust()) as kept:  # a keep-alive connection opened before
        assert kept.get(f"{mend.agent}/bytes/1").status_code == 200
        renewed = rotating.renew(pki)
        mend.proc.send_signal(signal.SIGHUP)
        assert serial_after(mend.agent, pki, before) == renewed
        assert kept.get(f"{mend.agent}/bytes/2").content == b"\0\1"
    assert mend.proc.poll() is None
    assert [line["listener"] for line in rotating.log_lines("tls_certificate_reloaded")] == [
        "agent"
    ]


def test_file_watcher_serves_a_renewed_certificate(pki: PKI, start_rotating: Any) -> None:
    """With the watcher on (the default) renewed files are served with no signal at all."""
    rotating: Rotating = start_rotating(watch=True)
    before = serial(rotating.mend.agent, pki)
    renewed = rotating.renew(pki)
    assert serial_after(rotating.mend.agent, pki, before) == renewed


def test_bad_certificate_at_reload_keeps_the_old_one(pki: PKI, start_rotating: Any) -> None:
    """A certificate file that does not load at ``POST /-/reload`` leaves the served one in
    place; the failure is logged with the setting, file and reason, and counted."""
    rotating: Rotating = start_rotating(watch=False)
    mend = rotating.mend
    before = serial(mend.agent, pki)
    rotating.cert.write_text("not a certificate\n")
    assert httpx.post(f"{mend.admin}/-/reload").status_code == 200  # the rules did reload
    assert serial(mend.agent, pki) == before
    metrics = httpx.get(f"{mend.admin}/metrics").text
    assert 'mend_tls_reloads_total{listener="agent",result="failure"} 1.0' in metrics
    [failed] = rotating.log_lines("tls_reload_failed")
    assert (failed["setting"], failed["file"]) == ("tls_cert", str(rotating.cert))
    assert failed["reason"] == "no PEM certificate in it"
    assert failed["level"] == "error"


def encrypted(key: Path, directory: Path) -> Path:
    """``key`` encrypted with a password, as ``openssl genpkey -aes256`` writes it."""
    loaded = serialization.load_pem_private_key(key.read_bytes(), password=None)
    out = directory / "encrypted.key"
    out.write_bytes(
        loaded.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    return out


@pytest.mark.parametrize(
    ("files", "setting", "reason"),
    [
        (lambda pki, _: (pki.server.cert, pki.client.key), "tls_key", "the key does not match"),
        (
            lambda pki, tmp: (pki.server.cert, encrypted(pki.server.key, tmp)),
            "tls_key",
            "encrypted",
        ),
        (lambda pki, _: (pki.server.cert, None), "tls_cert", "no PEM private key in it"),
        (lambda pki, _: (pki.server.key, pki.server.key), "tls_cert", "no PEM certificate in it"),
    ],
)
def test_certificate_problems_name_the_file_at_fault(
    pki: PKI, tmp_path: Path, files: Any, setting: str, reason: str
) -> None:
    """Each problem names the setting and file at fault, in words (OpenSSL says "PEM lib"), and
    an encrypted key is refused rather than prompted for on the terminal."""
    cert, key = files(pki, tmp_path)
    settings = Settings(routes=(Route(name="a", upstream="http://a"),), tls_cert=cert, tls_key=key)
    [problem] = check_files(settings)
    assert problem.setting == setting
    assert problem.path == (cert if setting == "tls_cert" else key)
    assert reason in problem.reason


# --- start-up errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (("--tls-cert", "{bad}"), "--tls-cert {bad}: no PEM certificate in it"),
        (("--tls-cert", "{missing}"), "--tls-cert {missing}: No such file or directory"),
        (
            ("--tls-cert", "{cert}", "--tls-key", "{bad}"),
            "--tls-key {bad}: no PEM private key in it",
        ),
        (("--admin-tls-cert", "{bad}"), "--admin-tls-cert {bad}: no PEM certificate in it"),
        (("--upstream-ca", "{bad}"), "--upstream-ca {bad}: no PEM certificate in it"),
    ],
)
def test_bad_certificate_file_at_start_is_one_line_exit_2(
    pki: PKI, tmp_path: Path, flags: tuple[str, ...], expected: str
) -> None:
    """A file that does not load stops mend at start: one ``mend: error:`` line, exit 2."""
    names = {
        "bad": str(tmp_path / "bad.pem"),
        "missing": str(tmp_path / "missing.pem"),
        "cert": str(pki.server.cert),
    }
    Path(names["bad"]).write_text("garbage\n")
    proc = run_mend(
        *("--upstream", "https://127.0.0.1:9"),
        *("--listen", f"127.0.0.1:{free_port()}", "--admin-listen", f"127.0.0.1:{free_port()}"),
        *(flag.format(**names) for flag in flags),
    )
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert err.decode() == f"mend: error: {expected.format(**names)}\n"
