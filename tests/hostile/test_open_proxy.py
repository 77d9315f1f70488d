"""No request target reaches another host, or a path above its route's base (issue 13 §1).

A canary listener on loopback counts every connection it accepts: a control request straight to it
must count, and no request sent through mend may ever reach it, whatever the target says. The
upstream echoes the raw target it received, so each test also sees exactly what was forwarded.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hostile.procs import (
    MendProcess,
    Recorder,
    body_of,
    echo_server,
    mend_process,
    raw_exchange,
    status_of,
)


@pytest.fixture(scope="module")
def canary() -> Iterator[tuple[int, Recorder]]:
    with echo_server() as server:
        yield server


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[int, Recorder]]:
    with echo_server() as server:
        yield server


@pytest.fixture(scope="module")
def mend(
    tmp_path_factory: pytest.TempPathFactory, upstream: tuple[int, Recorder]
) -> Iterator[MendProcess]:
    base = f"http://127.0.0.1:{upstream[0]}"
    config = {
        "default_packs": False,
        "watch_rules": False,
        "routes": [
            {"name": "stripped", "prefix": "/api", "upstream": f"{base}/v1", "strip_prefix": True},
            {"name": "prefixed", "prefix": "/pre", "upstream": base},
            {"name": "based", "prefix": "/", "upstream": f"{base}/base"},
        ],
    }
    with mend_process(tmp_path_factory.mktemp("open-proxy"), config) as running:
        yield running


def _get(mend: MendProcess, target: str, method: str = "GET") -> bytes:
    request = (
        f"{method} {target} HTTP/1.1\r\nHost: agent.example\r\n"
        "Authorization: Bearer agent-secret-7f3a\r\nConnection: close\r\n\r\n"
    )
    return raw_exchange(mend.port, request.encode("latin-1"))


def test_control_request_reaches_the_canary(canary: tuple[int, Recorder]) -> None:
    """The canary counts connections: without this the other tests could not fail."""
    port, recorder = canary
    before = recorder.connections
    response = raw_exchange(port, b"GET /x HTTP/1.1\r\nHost: c\r\nConnection: close\r\n\r\n")
    assert status_of(response) == 200
    assert recorder.connections == before + 1


@pytest.mark.parametrize(
    "shape",
    [
        "//{h}/x",
        "///{h}/x",
        "/\\{h}/x",
        "/%2F%2F{h}/x",
        "/%2f%2f{h}/x",
        "//{h}",
        "//localhost:{p}/x",
        "//user:pw@{h}/x",
        "/api//{h}/x",
        "/pre//{h}/x",
        "/api/..//{h}/x",
    ],
)
def test_network_path_targets_stay_on_the_configured_upstream(
    shape: str,
    mend: MendProcess,
    canary: tuple[int, Recorder],
    upstream: tuple[int, Recorder],
) -> None:
    """``//host:port`` and its disguises are a path on the configured upstream, never a host."""
    port, recorder = canary
    target = shape.format(h=f"127.0.0.1:{port}", p=port)
    before = recorder.connections
    response = _get(mend, target)
    assert recorder.connections == before, f"{target} reached the canary"
    status = status_of(response)
    assert status in (200, 400), response
    if status == 200:
        assert upstream[1].targets[-1].endswith(target.removeprefix("/api").removeprefix("/"))


@pytest.mark.parametrize("shape", ["http://{h}/x", "https://{h}/x", "{h}", "*"])
def test_absolute_form_and_authority_form_are_refused(
    shape: str, mend: MendProcess, canary: tuple[int, Recorder]
) -> None:
    """Absolute-form targets (forward-proxy requests) get a 400 envelope, never a connection."""
    port, recorder = canary
    before = recorder.connections
    response = _get(mend, shape.format(h=f"127.0.0.1:{port}"))
    assert recorder.connections == before
    assert status_of(response) in (400, 404)
    assert body_of(response)["error"]["code"] in ("FORWARD_PROXY_REFUSED", "MALFORMED_REQUEST")


def test_connect_is_refused(mend: MendProcess, canary: tuple[int, Recorder]) -> None:
    """CONNECT host:port never opens a tunnel."""
    port, recorder = canary
    before = recorder.connections
    response = _get(mend, f"127.0.0.1:{port}", method="CONNECT")
    assert recorder.connections == before
    assert status_of(response) == 400
    assert body_of(response)["error"]["code"] == "FORWARD_PROXY_REFUSED"


@pytest.mark.parametrize(
    "target",
    [
        "/../../admin",
        "/..",
        "/a/../../admin",
        "/%2e%2e/admin",
        "/%2E%2E%2fadmin",
        "/..%2fadmin",
        "/..\\admin",
        "/api/../pre/x",
        "/api/%2e%2e/x",
        "/pre/../../x",
        "/x/./../../y",
    ],
)
def test_dot_segments_above_the_base_are_refused(
    target: str, mend: MendProcess, upstream: tuple[int, Recorder]
) -> None:
    """A target that would climb above the route's base path gets INVALID_REQUEST_TARGET."""
    seen = len(upstream[1].targets)
    response = _get(mend, target)
    assert status_of(response) == 400, response
    assert body_of(response)["error"]["code"] == "INVALID_REQUEST_TARGET"
    assert len(upstream[1].targets) == seen


@pytest.mark.parametrize(
    ("target", "forwarded"),
    [
        ("/a/../b", "/base/a/../b"),
        ("/./x", "/base/./x"),
        ("/a/%2e%2e/b?q=%2F..", "/base/a/%2e%2e/b?q=%2F.."),
        ("/caf%C3%A9/%7Euser", "/base/caf%C3%A9/%7Euser"),
        ("/api/v/../w", "/v1/v/../w"),
        ("/api?x=1", "/v1/?x=1"),
        ("/pre/a/../b", "/pre/a/../b"),
    ],
)
def test_targets_inside_the_base_are_forwarded_as_sent(
    target: str, forwarded: str, mend: MendProcess, upstream: tuple[int, Recorder]
) -> None:
    """Dot segments that stay inside, and percent-encoding, reach the upstream byte for byte."""
    response = _get(mend, target)
    assert status_of(response) == 200, response
    assert upstream[1].targets[-1] == forwarded


def test_agent_credentials_reach_only_the_configured_upstream(
    mend: MendProcess, upstream: tuple[int, Recorder], canary: tuple[int, Recorder]
) -> None:
    """The Authorization header goes to the configured upstream, with its own Host."""
    _get(mend, f"//127.0.0.1:{canary[0]}/steal")
    headers = upstream[1].headers[-1]
    assert headers["Authorization"] == "Bearer agent-secret-7f3a"
    assert headers["Host"] == f"127.0.0.1:{upstream[0]}"


_PIECES = st.sampled_from(
    [
        "/",
        "//",
        "\\",
        ".",
        "..",
        "%2e",
        "%2E",
        "%2f",
        "%2F",
        "%5c",
        "@",
        ":",
        "?",
        "#",
        "api",
        "pre",
    ]
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(pieces=st.lists(st.one_of(_PIECES, st.just("{h}")), min_size=1, max_size=10))
def test_no_generated_target_reaches_another_host(
    pieces: list[str],
    mend: MendProcess,
    canary: tuple[int, Recorder],
    upstream: tuple[int, Recorder],
) -> None:
    """Hypothesis builds targets from separators, dots, encodings and the canary's address:
    none connects to the canary, and every forwarded one stays under its route's base."""
    port, recorder = canary
    target = "/" + "".join(pieces).format(h=f"127.0.0.1:{port}")
    before, seen = recorder.connections, len(upstream[1].targets)
    response = _get(mend, target)
    assert recorder.connections == before, target
    status = status_of(response)
    if status == 200:
        assert len(upstream[1].targets) == seen + 1
        assert upstream[1].targets[-1].startswith(("/v1/", "/pre", "/base/")), target
    else:
        assert status in (400, 404), (target, response)
