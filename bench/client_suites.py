"""Run the test suites of requests and httpx direct and through mend; list every test that differs.

    .venv/bin/python -m bench.client_suites [--keep DIR] [--suite requests|httpx] [--json FILE]
                                            [--mend-repo DIR]

Issue 14 ("Transparency"): a client library's own test suite is a large, independent set of
assertions about what an HTTP server answers. Each suite runs twice from its PyPI sdist, in a
venv of its own (never this repository's): **direct**, as its authors run it, and **through
mend**, with the suite's own plain-HTTP test servers put behind real ``mend run`` processes. The
JUnit XML of the two runs is compared test by test; a test whose outcome differs is run again,
twice in each mode, to tell a difference mend makes from a flaky test. Every difference must be
listed in ``bench/client_suites_expected.json`` (the table of ``docs/client-suites.md``), and
the script exits 1 while one is not, or is a mend bug (class b). See the doc for the results.

This file is also the pytest plugin loaded into those suites (``-p mend_client_suites_plugin``,
a copy of this file on their ``PYTHONPATH``), so it imports nothing but the standard library and
pytest. In the suites' runs it:

- ``--loopback-guard-log FILE`` (both runs): refuses, with an audit hook, every connect, DNS
  lookup or datagram that is not to loopback, and writes the test that tried it to FILE; no test
  reaches the internet, and one that would is listed in ``Suite.deselect``.
- ``--mend-front-fixture MODULE:NAME`` (the mend run): when that fixture has produced its server,
  starts ``mend run --upstream <server>`` on free loopback ports and hands the tests a stand-in
  that is the server in every respect but ``url``, ``host`` and ``port``, which are mend's.
- ``--mend-front-class MODULE:NAME`` (the mend run): the same for a server class used as
  ``with Server(...) as (host, port)``; ``--mend-front-skip NODEID`` leaves some tests' direct.

Every mend is stopped by its PID (its process group) when its server is torn down.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import http.client
import importlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import pytest

REPO = Path(__file__).resolve().parent.parent
EXPECTED = REPO / "bench" / "client_suites_expected.json"
PLUGIN = "mend_client_suites_plugin"
#: in ``--mend-log-dir``: the node ids of the tests that talked to a server behind mend
FRONTED_TESTS = "fronted-tests.txt"

REQUESTS_VERSION = "2.34.2"
HTTPX_VERSION = "0.28.1"
#: Runs of a differing test, in each mode, after the full runs.
RERUNS = 2
#: Seconds one whole pytest run may take before it is stopped.
RUN_TIMEOUT = 900.0
#: mend's ``--read-timeout`` in front of the raw servers of ``Suite.fronted_classes``, which
#: answer within 0.5 s or never (a handler whose assertion failed): 10 s, not the default 60,
#: so that one that never answers costs seconds. Fixtures' servers get mend's default: the
#: single-threaded httpbin can queue three ``/delay/10`` requests ahead of a test's.
RAW_SERVER_READ_TIMEOUT = 10


# --------------------------------------------------------------------------------------------
# The suites
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Suite:
    """One client library: its sdist, its test requirements and how its tests are run."""

    name: str
    version: str
    #: extras of the library itself, installed from the unpacked sdist
    extras: str
    #: the suite's test requirements, pinned (from the sdist's requirements and pyproject)
    requirements: tuple[str, ...]
    #: pytest arguments after ``tests`` (markers, xdist)
    pytest_args: tuple[str, ...]
    #: fixtures whose server goes behind mend, as ``module:fixture``
    fronted_fixtures: tuple[str, ...]
    #: server classes (``with Server() as (host, port)``) put behind mend, as ``module:class``
    fronted_classes: tuple[str, ...] = ()
    #: tests (node id prefixes) whose ``fronted_classes`` servers stay direct -> why
    direct: dict[str, str] = field(default_factory=dict)
    #: tests that need the internet (or another non-loopback host): node id -> why
    deselect: dict[str, str] = field(default_factory=dict)
    #: loopback ports the suite's own servers bind, which must be free
    fixed_ports: tuple[int, ...] = ()

    @property
    def dirname(self) -> str:
        return f"{self.name}-{self.version}"


REQUESTS = Suite(
    name="requests",
    version=REQUESTS_VERSION,
    extras="[socks]",
    # requirements-dev.txt and the `test` dependency group of pyproject.toml (pytest-cov left
    # out: coverage is not measured), pinned to the versions this comparison was made with.
    requirements=(
        "pytest==8.3.4",
        "pytest-httpbin==2.1.0",
        "httpbin==0.10.4",
        "flask==3.1.3",
        "werkzeug==3.1.9",
        "pytest-mock==3.17.0",
        "pytest-xdist==3.8.0",
        "trustme==1.2.1",
        "PySocks==1.7.1",
        "urllib3==2.8.0",
    ),
    # pytest-xdist is one of requests' test requirements: two workers, one per core.
    pytest_args=("-n", "2"),
    fronted_fixtures=("pytest_httpbin.plugin:httpbin",),
    # the raw-socket servers of test_lowlevel.py; TLSServer (a subclass) stays direct
    fronted_classes=("tests.testserver.server:Server",),
    direct={
        "tests/test_lowlevel.py::test_use_proxy_from_environment": (
            "the server stands in for a SOCKS proxy, which mend is not"
        ),
        "tests/test_testserver.py::": "tests of the test server itself, not of requests",
    },
    deselect={
        "tests/test_requests.py::TestTimeout::test_connect_timeout[timeout0]": (
            "connects to 10.255.255.1 (TARPIT) and expects the connect to time out"
        ),
        "tests/test_requests.py::TestTimeout::test_connect_timeout[timeout1]": (
            "connects to 10.255.255.1 (TARPIT) and expects the connect to time out"
        ),
        "tests/test_requests.py::TestTimeout::test_total_timeout_connect[timeout0]": (
            "connects to 10.255.255.1 (TARPIT) and expects the connect to time out"
        ),
        "tests/test_requests.py::TestTimeout::test_total_timeout_connect[timeout1]": (
            "connects to 10.255.255.1 (TARPIT) and expects the connect to time out"
        ),
        "tests/test_requests.py::TestRequests::test_errors"
        "[http://doesnotexist.google.com-ConnectionError]": (
            "looks up doesnotexist.google.com in the DNS"
        ),
        "tests/test_requests.py::TestRequests::test_proxy_error": (
            "looks up non-resolvable-address in the DNS"
        ),
    },
)

HTTPX = Suite(
    name="httpx",
    version=HTTPX_VERSION,
    extras="[brotli,cli,http2,socks,zstd]",
    # requirements.txt of the 0.28.1 tag (not in the sdist): its "Tests & Linting" pins. The
    # suite turns every warning into an error, so the libraries whose later releases deprecate
    # what it calls are pinned to the releases of its time (click 8.2 deprecates
    # isolated_filesystem; anyio, httpcore and h11 as httpx 0.28.1 was released with).
    requirements=(
        "pytest==8.3.4",
        "chardet==5.2.0",
        "cryptography==44.0.0",
        "trio==0.27.0",
        "trustme==1.2.0",
        "uvicorn==0.32.1",
        "click==8.1.7",
        "anyio==4.7.0",
        "httpcore==1.0.7",
        "h11==0.14.0",
    ),
    # `network` is httpx's own marker for the tests that need the internet.
    pytest_args=("-m", "not network"),
    fronted_fixtures=("tests.conftest:server",),
    # its uvicorn server binds 127.0.0.1:8000, and waits forever when it cannot
    fixed_ports=(8000,),
)

SUITES = {suite.name: suite for suite in (REQUESTS, HTTPX)}


# --------------------------------------------------------------------------------------------
# The pytest plugin (runs inside the suites' venvs)
# --------------------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mend", "mend's client-suite comparison (bench/client_suites.py)")
    group.addoption("--mend-front-fixture", action="append", default=[], metavar="MODULE:NAME")
    group.addoption("--mend-front-class", action="append", default=[], metavar="MODULE:NAME")
    group.addoption("--mend-front-skip", action="append", default=[], metavar="NODEID")
    group.addoption("--mend-python", default=sys.executable, metavar="PATH")
    group.addoption("--mend-repo", default=None, metavar="DIR", help="where `-m proxy` runs")
    group.addoption("--mend-log-dir", default=tempfile.gettempdir(), metavar="DIR")
    group.addoption("--loopback-guard-log", default=None, metavar="FILE")


class _State:
    """The plugin's settings and the test running now (read from other threads too)."""

    current: str | None = None
    python = sys.executable
    repo = REPO
    log_dir = Path(tempfile.gettempdir())
    skip: tuple[str, ...] = ()
    #: argument names of the fixtures put behind mend
    fixtures: frozenset[str] = frozenset()

    @classmethod
    def fronted(cls, nodeid: str | None) -> None:
        """Note that test ``nodeid`` talks to a server behind mend (``fronted-tests.txt``)."""
        if nodeid is not None:
            cls.log_dir.mkdir(parents=True, exist_ok=True)
            with (cls.log_dir / FRONTED_TESTS).open("a", encoding="utf-8") as out:
                out.write(nodeid + "\n")

    @classmethod
    def skipped(cls) -> bool:
        """The running test's servers stay direct (``--mend-front-skip``, a node id prefix)."""
        return cls.current is not None and cls.current.startswith(cls.skip)


def pytest_configure(config: pytest.Config) -> None:
    _State.python = config.getoption("--mend-python")
    _State.repo = Path(config.getoption("--mend-repo") or REPO)
    _State.log_dir = Path(config.getoption("--mend-log-dir"))
    _State.skip = tuple(config.getoption("--mend-front-skip"))
    specs = config.getoption("--mend-front-fixture")
    _State.fixtures = frozenset(spec.partition(":")[2] for spec in specs)
    log = config.getoption("--loopback-guard-log")
    if log:
        _Guard.install(Path(log))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Patch the server classes named by ``--mend-front-class`` (their modules are imported)."""
    for spec in session.config.getoption("--mend-front-class"):
        module, _, name = spec.partition(":")
        _front_class(getattr(importlib.import_module(module), name))


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    _State.current = nodeid


def pytest_runtest_setup(item: pytest.Item) -> None:
    if _State.fixtures.intersection(getattr(item, "fixturenames", ())):
        _State.fronted(item.nodeid)


def pytest_runtest_logfinish(nodeid: str, location: object) -> None:
    _State.current = None


class _Guard:
    """An audit hook refusing every socket operation that would leave the machine."""

    log: Path | None = None
    lock = threading.Lock()

    @classmethod
    def install(cls, log: Path) -> None:
        if cls.log is None:
            cls.log = log
            sys.addaudithook(cls.hook)

    @classmethod
    def hook(cls, event: str, args: tuple[Any, ...]) -> None:
        if event in ("socket.connect", "socket.sendto"):
            address = args[1]
            if isinstance(address, tuple) and address and not _local_host(address[0]):
                cls.refuse(event, address)
                raise OSError(errno.ENETUNREACH, f"loopback guard: {address!r} is not loopback")
        elif event in ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex"):
            host = args[0]
            if not _local_host(host) and not _ip_literal(host):
                cls.refuse(event, host)
                raise socket.gaierror(socket.EAI_NONAME, f"loopback guard: no lookup of {host!r}")

    @classmethod
    def refuse(cls, event: str, what: object) -> None:
        if cls.log is None:
            return
        with cls.lock, cls.log.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"test": _State.current, "event": event, "target": repr(what)}))
            out.write("\n")


def _text(host: object) -> str | None:
    if host is None:
        return ""
    if isinstance(host, bytes):
        return host.decode("ascii", "replace")
    return host if isinstance(host, str) else None


def _ip_literal(host: object) -> bool:
    text = _text(host)
    if text is None:
        return False
    try:
        ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return False
    return True


def _local_host(host: object) -> bool:
    text = _text(host)
    if text is None:
        return False
    if text in ("", "localhost") or text.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return False
    return ip.is_loopback or ip.is_unspecified


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(
    fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
) -> Generator[None, Any, Any]:
    """Hand the tests a mend-fronted stand-in for a fixture named by ``--mend-front-fixture``."""
    value = yield
    wanted = f"{getattr(fixturedef.func, '__module__', '')}:{fixturedef.argname}"
    if wanted not in request.config.getoption("--mend-front-fixture"):
        return value
    front = FrontedServer(value, Mend.start(str(value.url)))
    fixturedef.addfinalizer(front.mend.stop)
    # The fixture's value is what pytest caches and hands to every test that asks for it.
    assert fixturedef.cached_result is not None
    fixturedef.cached_result = (front, *fixturedef.cached_result[1:])
    return front


def _front_class(cls: type[Any]) -> None:
    """Put mend in front of every ``cls`` (not a subclass: requests' TLSServer stays direct)
    whose ``__enter__`` starts it and returns ``(host, port)``; the test gets mend's instead.

    mend starts first, in front of a port chosen for the server: these servers stop accepting
    5 s after they start, and mend's start-up must not eat into that."""
    enter, leave = cls.__enter__, cls.__exit__

    def __enter__(self: Any) -> Any:
        if type(self) is not cls or _State.skipped():
            return enter(self)
        if not self.port:
            self.port = free_port()
        self.mend_front = Mend.start(f"http://{self.host}:{self.port}", RAW_SERVER_READ_TIMEOUT)
        try:
            enter(self)
        except BaseException:
            self.__dict__.pop("mend_front").stop()
            raise
        return (self.mend_front.host, self.mend_front.port)

    def __exit__(self: Any, *exc: object) -> Any:
        try:
            return leave(self, *exc)
        finally:
            front = self.__dict__.pop("mend_front", None)
            if front is not None:
                front.stop()

    cls.__enter__, cls.__exit__ = __enter__, __exit__


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _answers(port: int, path: str) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1.0)
    try:
        conn.request("GET", path)
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


@dataclass
class Mend:
    """A ``mend run`` on free loopback ports in front of one upstream, stopped by its PID."""

    popen: subprocess.Popen[bytes]
    port: int
    host: str = "127.0.0.1"

    @classmethod
    def start(cls, url: str, read_timeout: int | None = None) -> Mend:
        parts = urlsplit(url)
        if parts.scheme != "http":
            raise RuntimeError(f"mend has no TLS listener: cannot front {url}")
        upstream = f"http://{parts.netloc}"
        port, admin = free_port(), free_port()
        _State.log_dir.mkdir(parents=True, exist_ok=True)
        _State.fronted(_State.current)
        log_path = _State.log_dir / f"mend-{port}.log"
        cmd = [_State.python, "-m", "proxy", "run", "--upstream", upstream]
        cmd += ["--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}"]
        if read_timeout is not None:
            cmd += ["--read-timeout", str(read_timeout)]
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        with log_path.open("ab") as log:
            popen = subprocess.Popen(
                cmd,
                cwd=_State.repo,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        mend = cls(popen, port)
        deadline = time.monotonic() + 30.0
        while not _answers(admin, "/readyz"):
            if popen.poll() is not None or time.monotonic() > deadline:
                mend.stop()
                tail = log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"mend did not start in front of {upstream}:\n{tail}")
            time.sleep(0.02)
        return mend

    def stop(self) -> None:
        stop_group(self.popen)


class FrontedServer:
    """A server fixture's value with mend in front: ``url``, ``host``, ``port`` are mend's,
    everything else is the server's own."""

    def __init__(self, server: Any, mend: Mend) -> None:
        self._server = server
        self.mend = mend
        self.host, self.port = mend.host, mend.port
        parts = urlsplit(str(server.url))
        self._url = urlunsplit(parts._replace(netloc=f"{mend.host}:{mend.port}"))

    @property
    def url(self) -> Any:
        # the type of the server's own (a str for pytest-httpbin, an httpx.URL for httpx)
        return type(self._server.url)(self._url)

    def join(self, url: str) -> str:  # pytest-httpbin's Server.join
        return urljoin(self._url, url)

    def __add__(self, other: str) -> str:  # pytest-httpbin's Server.__add__
        return self._url + other

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)


def stop_group(popen: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM the process group led by ``popen``, SIGKILL it if it lingers; always reap."""
    if popen.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(popen.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, signal.SIGKILL)
    popen.wait()


# --------------------------------------------------------------------------------------------
# The driver (runs in this repository's venv)
# --------------------------------------------------------------------------------------------

MODES = ("direct", "mend")
PASSING = frozenset({"passed", "xfailed"})


def _run_logged(cmd: Sequence[str], log: Path, *, cwd: Path | None = None, **kw: Any) -> int:
    """Run ``cmd`` with its output in ``log``; stop its whole process group on timeout."""
    with log.open("ab") as out:
        popen = subprocess.Popen(
            list(cmd),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **kw,
        )
        try:
            return popen.wait(RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            stop_group(popen)
            raise RuntimeError(f"{cmd[:4]} ran past {RUN_TIMEOUT:.0f}s; see {log}") from None
        finally:
            stop_group(popen)


def _check(code: int, what: str, log: Path) -> None:
    if code != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{what} failed (exit {code}); end of {log}:\n{tail}")


def download(workdir: Path, suites: Sequence[Suite]) -> None:
    """The sdists from PyPI (``pip download --no-binary :all:``), each unpacked once."""
    sdists = workdir / "sdists"
    sdists.mkdir(parents=True, exist_ok=True)
    missing = [s for s in suites if not (sdists / f"{s.dirname}.tar.gz").exists()]
    if missing:
        log = workdir / "download.log"
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        cmd += ["--disable-pip-version-check", "-d", str(sdists)]
        cmd += [f"{s.name}=={s.version}" for s in missing]
        _check(_run_logged(cmd, log), "pip download", log)
    for suite in suites:
        if not (workdir / suite.dirname).is_dir():
            with tarfile.open(sdists / f"{suite.dirname}.tar.gz") as tar:
                tar.extractall(workdir, filter="data")


def make_venv(workdir: Path, suite: Suite) -> Path:
    """A venv with the library (from its sdist) and its test requirements; reused when current."""
    venv = workdir / f"venv-{suite.name}"
    python = venv / "bin" / "python"
    wanted = "\n".join((f"{suite.dirname}{suite.extras}", *suite.requirements))
    stamp = venv / "mend-requirements.txt"
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    shutil.rmtree(venv, ignore_errors=True)
    log = workdir / f"venv-{suite.name}.log"
    _check(_run_logged([sys.executable, "-m", "venv", str(venv)], log), "python -m venv", log)
    cmd = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    cmd += [f"{workdir / suite.dirname}{suite.extras}", *suite.requirements]
    _check(_run_logged(cmd, log), f"pip install for {suite.name}", log)
    stamp.write_text(wanted)
    return python


def install_plugin(workdir: Path) -> Path:
    """This file, as the module ``mend_client_suites_plugin`` in a directory of its own."""
    plugin_dir = workdir / "plugin"
    plugin_dir.mkdir(exist_ok=True)
    shutil.copyfile(Path(__file__), plugin_dir / f"{PLUGIN}.py")
    return plugin_dir


@dataclass(frozen=True)
class Workspace:
    """Where the sdists, venvs and runs live, and the mend that goes in front."""

    workdir: Path
    plugin_dir: Path
    #: the checkout ``python -m proxy run`` runs from
    mend_repo: Path


@dataclass
class Run:
    """One pytest run of one suite in one mode: its outcomes by node id."""

    suite: str
    mode: str
    outcomes: dict[str, str]
    seconds: float
    exit_code: int
    guard: list[dict[str, str]]


def run_pytest(
    suite: Suite, mode: str, ws: Workspace, python: Path, *, tag: str, nodeids: Sequence[str] = ()
) -> Run:
    """``pytest tests`` (or just ``nodeids``) in the unpacked sdist, direct or through mend."""
    out = ws.workdir / "runs" / f"{suite.name}-{mode}-{tag}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    junit, guard_log = out / "junit.xml", out / "guard.jsonl"
    cmd = [str(python), "-m", "pytest", *(nodeids or ["tests"]), "-q", "-p", "no:cacheprovider"]
    cmd += ["-p", PLUGIN, f"--junitxml={junit}", f"--loopback-guard-log={guard_log}"]
    cmd += suite.pytest_args
    for nodeid in suite.deselect:
        cmd += ["--deselect", nodeid]
    if mode == "mend":
        cmd += [f"--mend-python={sys.executable}", f"--mend-repo={ws.mend_repo}"]
        cmd += [f"--mend-log-dir={out / 'mend'}"]
        cmd += [f"--mend-front-fixture={fixture}" for fixture in suite.fronted_fixtures]
        cmd += [f"--mend-front-class={cls}" for cls in suite.fronted_classes]
        cmd += [f"--mend-front-skip={nodeid}" for nodeid in suite.direct]
    env = {**os.environ, "PYTHONPATH": str(ws.plugin_dir), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("VIRTUAL_ENV", None)
    root = ws.workdir / suite.dirname
    start = time.monotonic()
    code = _run_logged(cmd, out / "pytest.log", cwd=root, env=env)
    seconds = time.monotonic() - start
    if not junit.exists():
        _check(code or 1, f"pytest ({suite.name}, {mode})", out / "pytest.log")
    guard = []
    if guard_log.exists():
        guard = [json.loads(line) for line in guard_log.read_text().splitlines() if line]
    return Run(suite.name, mode, parse_junit(junit, root), seconds, code, guard)


def _outcome(case: ET.Element) -> str:
    tags = {child.tag: child for child in case}
    if "error" in tags:
        return "error"
    if "failure" in tags:
        return "failed"
    if "skipped" in tags:
        return "xfailed" if tags["skipped"].get("type") == "pytest.xfail" else "skipped"
    return "passed"


#: worst first: a test reported twice (a teardown error after a pass) keeps the worse outcome
SEVERITY = ("error", "failed", "skipped", "xfailed", "passed")


def nodeid_of(root: Path, classname: str, name: str) -> str:
    """Turn JUnit's dotted ``classname`` back into a pytest node id (the module is a file)."""
    parts = classname.split(".") if classname else []
    for cut in range(len(parts), 0, -1):
        module = "/".join(parts[:cut]) + ".py"
        if (root / module).is_file():
            return "::".join([module, *parts[cut:], name])
    return "::".join([*parts, name])


def parse_junit(path: Path, root: Path) -> dict[str, str]:
    outcomes: dict[str, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        nodeid = nodeid_of(root, case.get("classname", ""), case.get("name", ""))
        outcome = _outcome(case)
        if nodeid in outcomes:
            outcome = min(outcome, outcomes[nodeid], key=SEVERITY.index)
        outcomes[nodeid] = outcome
    return outcomes


@dataclass
class Difference:
    """A test whose outcome is not the same direct and through mend."""

    test: str
    direct: list[str]
    mend: list[str]

    @property
    def kind(self) -> str:
        """``stable``: every run of each mode agreed, a difference mend makes. ``flaky``: the
        test passes and fails direct too, so it tells nothing about mend. ``intermittent``:
        steady direct, passing only sometimes through mend, which may still be mend's."""
        if not _steady(self.direct):
            return "flaky"
        return "stable" if _steady(self.mend) else "intermittent"

    @property
    def stable(self) -> bool:
        return self.kind == "stable"

    def as_json(self) -> dict[str, Any]:
        return {"test": self.test, "direct": self.direct, "mend": self.mend, "kind": self.kind}


def _steady(outcomes: list[str]) -> bool:
    return len({outcome in PASSING for outcome in outcomes}) == 1


def _bucket(direct: str | None, mend: str | None) -> str:
    if direct is None or mend is None:
        return "differs"
    if (direct in PASSING) != (mend in PASSING):
        return "differs"
    if direct in PASSING:
        return "passed both"
    if direct == "skipped" and mend == "skipped":
        return "skipped both"
    return "failed both"


def compare(direct: Run, mend: Run) -> tuple[Counter[str], list[str], list[str]]:
    """Counts per bucket, the differing node ids and the ones that failed both ways."""
    buckets: Counter[str] = Counter()
    differs: list[str] = []
    failed: list[str] = []
    for test in sorted(direct.outcomes.keys() | mend.outcomes.keys()):
        bucket = _bucket(direct.outcomes.get(test), mend.outcomes.get(test))
        buckets[bucket] += 1
        if bucket == "differs":
            differs.append(test)
        elif bucket == "failed both":
            failed.append(test)
    return buckets, differs, failed


def check_ports(suite: Suite) -> None:
    for port in suite.fixed_ports:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            try:
                s.bind(("127.0.0.1", port))
            except OSError as exc:
                raise RuntimeError(
                    f"{suite.name}'s test server needs 127.0.0.1:{port}: {exc}"
                ) from None


def run_suite(suite: Suite, ws: Workspace) -> dict[str, Any]:
    """Both full runs, then every differing test again, ``RERUNS`` times in each mode."""
    python = make_venv(ws.workdir, suite)
    check_ports(suite)
    runs = {mode: run_pytest(suite, mode, ws, python, tag="full") for mode in MODES}
    for run in runs.values():
        print(
            f"  {suite.name} {run.mode}: {_counts(run.outcomes)} in {run.seconds:.0f}s", flush=True
        )
    buckets, differs, failed = compare(runs["direct"], runs["mend"])
    history = {t: {m: [runs[m].outcomes.get(t, "missing")] for m in MODES} for t in differs}
    for attempt in range(RERUNS if differs else 0):
        for mode in MODES:
            tag = f"rerun{attempt + 1}"
            rerun = run_pytest(suite, mode, ws, python, tag=tag, nodeids=differs)
            for test in differs:
                history[test][mode].append(rerun.outcomes.get(test, "missing"))
    differences = [Difference(t, history[t]["direct"], history[t]["mend"]) for t in differs]
    guard = [hit for run in runs.values() for hit in run.guard]
    mend_logs = ws.workdir / "runs" / f"{suite.name}-mend-full" / "mend"
    fronted_log = mend_logs / FRONTED_TESTS
    fronted = set(fronted_log.read_text().split("\n")) - {""} if fronted_log.exists() else set()
    return {
        "version": suite.version,
        "counts": {mode: dict(Counter(run.outcomes.values())) for mode, run in runs.items()},
        "seconds": {mode: round(run.seconds, 1) for mode, run in runs.items()},
        "buckets": dict(buckets),
        "failed_both": {t: [runs[m].outcomes[t] for m in MODES] for t in failed},
        "differs": [d.as_json() for d in differences],
        "deselected": suite.deselect,
        "direct": suite.direct,
        "guard": guard,
        "through_mend": mend_traffic(mend_logs),
        "fronted_tests": len(fronted),
        "fronted_passed_both": len(fronted - set(differs) - set(failed)),
    }


def mend_traffic(log_dir: Path) -> dict[str, int]:
    """How many mend processes ran in front of the suite's servers, and the requests they
    logged by outcome (``passthrough``, ``envelope``, ``proxy_failure``...)."""
    outcomes: Counter[str] = Counter()
    logs = sorted(log_dir.glob("mend-*.log"))
    for log in logs:
        for line in log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict) and event.get("event") == "request":
                    outcomes[str(event.get("outcome"))] += 1
    return {"processes": len(logs), "requests": sum(outcomes.values()), **outcomes}


def _counts(outcomes: dict[str, str]) -> str:
    counts = Counter(outcomes.values())
    return ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))


#: Classes of difference that are not mend bugs: (a) intended and documented, (c) the test
#: hard-codes the direct server's address. (b) is a mend bug.
ACCEPTED = frozenset({"a", "c"})


def load_expected(path: Path = EXPECTED) -> dict[str, dict[str, dict[str, Any]]]:
    """``{suite: {test: {"class": "a" | "b" | "c", "reason": ...}}}``."""
    data: dict[str, dict[str, dict[str, Any]]] = json.loads(path.read_text())
    return {suite: tests for suite, tests in data.items() if not suite.startswith("_")}


def verdict(
    results: dict[str, dict[str, Any]], expected: dict[str, dict[str, dict[str, Any]]]
) -> list[str]:
    """What is wrong with these results: unlisted differences, class (b) bugs, stray traffic."""
    problems: list[str] = []
    for name, result in results.items():
        listed = expected.get(name, {})
        for diff in result["differs"]:
            entry = listed.get(diff["test"])
            if entry is None:
                if diff["kind"] != "flaky":  # a test flaky on its own says nothing about mend
                    problems.append(f"{name}: {diff['kind']}, not listed: {diff}")
            elif entry["class"] not in ACCEPTED:
                bug = entry.get("bug", "")
                problems.append(f"{name}: differs (class {entry['class']} {bug}): {diff['test']}")
        for hit in result["guard"]:
            problems.append(f"{name}: non-loopback traffic refused: {hit}")
    return problems


def print_report(
    results: dict[str, dict[str, Any]], expected: dict[str, dict[str, dict[str, Any]]]
) -> None:
    for name, result in results.items():
        print(f"\n{name} {result['version']}")
        for mode in MODES:
            counts = ", ".join(f"{n} {k}" for k, n in sorted(result["counts"][mode].items()))
            print(f"  {mode:6} {counts} ({result['seconds'][mode]:.0f}s)")
        print("  " + ", ".join(f"{n} {k}" for k, n in sorted(result["buckets"].items())))
        traffic = ", ".join(f"{n} {k}" for k, n in result["through_mend"].items())
        print(f"  through mend: {traffic}")
        print(
            f"  {result['fronted_tests']} tests talked to a server behind mend, "
            f"{result['fronted_passed_both']} of them passed (or were skipped) both ways"
        )
        for test, outcomes in result["failed_both"].items():
            print(f"  failed both  {test} ({' / '.join(outcomes)})")
        listed = expected.get(name, {})
        for diff in result["differs"]:
            entry = listed.get(diff["test"], {"class": "?", "reason": "not listed"})
            print(f"  differs ({diff['kind']}) [{entry['class']}] {diff['test']}")
            print(f"      direct {diff['direct']}  mend {diff['mend']}: {entry['reason']}")
        seen = {diff["test"] for diff in result["differs"]}
        for test in sorted(listed.keys() - seen):
            print(f"  listed but no longer differs: {test}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.client_suites", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--keep", type=Path, help="work in DIR and keep it (reused next time)")
    parser.add_argument(
        "--suite", action="append", choices=sorted(SUITES), help="repeatable; default: all"
    )
    parser.add_argument("--json", type=Path, help="also write the results to FILE")
    parser.add_argument(
        "--mend-repo",
        type=Path,
        default=REPO,
        help="the checkout mend runs from (default: this one), e.g. a `git archive` of a commit",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    suites = [SUITES[name] for name in args.suite or SUITES]
    with contextlib.ExitStack() as stack:
        if args.keep:
            workdir = args.keep.resolve()
            workdir.mkdir(parents=True, exist_ok=True)
        else:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mend-suites-")))
        start = time.monotonic()
        download(workdir, suites)
        ws = Workspace(workdir, install_plugin(workdir), args.mend_repo.resolve())
        results = {}
        for suite in suites:
            print(f"{suite.name} {suite.version}: direct, then through mend", flush=True)
            results[suite.name] = run_suite(suite, ws)
        expected = load_expected()
        print_report(results, expected)
        problems = verdict(results, expected)
        summary = {
            "seconds": round(time.monotonic() - start, 1),
            "suites": results,
            "problems": problems,
        }
        for path in [workdir / "result.json", *([args.json] if args.json else [])]:
            path.write_text(json.dumps(summary, indent=2) + "\n")
        print(f"\n{len(problems)} problem(s) in {summary['seconds']:.0f}s; results in {workdir}")
        for problem in problems:
            print(f"  {problem}")
        return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
