"""Shared fixtures: real aiohttp upstreams and a real mend, both on loopback."""

from __future__ import annotations

import io
import json
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import BaseTestServer, TestClient, TestServer
from prometheus_client import CollectorRegistry
from yarl import URL

from proxy.config.route import Route
from proxy.config.settings import Settings
from proxy.edge.server import Listener
from proxy.observation.logs import make_logger
from proxy.runtime.app import MendServer, create_app
from tests import summaries

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ROOT = Path(__file__).resolve().parent.parent


class MendTestServer(BaseTestServer):
    """A ``MendServer`` on a free loopback port, for ``aiohttp_client``."""

    def __init__(self, server: MendServer, **kwargs: Any) -> None:
        self.mend = server
        self.listener = Listener(server, shutdown_timeout=5.0)
        super().__init__(**kwargs)

    async def start_server(self, loop: Any = None, **kwargs: Any) -> None:
        if self.listener.bound:
            return
        ssl_context = kwargs.pop("ssl", None)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port or 0))
        self.port = sock.getsockname()[1]
        await self.listener.adopt(sock, ssl_context)
        self.scheme = self.scheme or ("https" if ssl_context else "http")
        self._root = URL(f"{self.scheme}://{self.host}:{self.port}")

    @property
    def started(self) -> bool:
        return bool(self.listener.bound)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self.listener.close()

    async def _make_runner(self, **kwargs: Any) -> web.BaseRunner:
        raise NotImplementedError("served by proxy.edge.server.Listener")


@dataclass
class Mend:
    """A running mend: an HTTP client to it, its metrics registry and its log lines."""

    client: TestClient[Any, Any]
    registry: CollectorRegistry
    log: io.StringIO

    def log_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.getvalue().splitlines() if line.strip()]

    def metric(self, name: str, **labels: str) -> float:
        value = self.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


StartUpstream = Callable[[dict[str, Handler]], Awaitable[TestServer]]
StartMend = Callable[..., Awaitable[Mend]]


@pytest.fixture
async def start_upstream(
    aiohttp_server: Callable[..., Awaitable[TestServer]],
) -> StartUpstream:
    """Start a real upstream serving ``{"METHOD /path": handler}`` (``/path`` means any method)."""

    async def start(routes: dict[str, Handler]) -> TestServer:
        app = web.Application()
        for key, handler in routes.items():
            method, _, path = key.rpartition(" ")
            app.router.add_route(method or "*", path, handler)
        return await aiohttp_server(app)

    return start


@pytest.fixture
async def start_mend(aiohttp_client: Callable[..., Awaitable[TestClient[Any, Any]]]) -> StartMend:
    """Start mend in front of ``upstream`` (a URL or TestServer); keyword args go to Settings."""

    async def start(
        upstream: str | TestServer,
        *,
        route: dict[str, Any] | None = None,
        routes: tuple[Route, ...] | None = None,
        **settings: Any,
    ) -> Mend:
        url = upstream if isinstance(upstream, str) else str(upstream.make_url("/")).rstrip("/")
        if routes is None:
            routes = (Route(name="default", upstream=url, **(route or {})),)
        registry = CollectorRegistry()
        log = io.StringIO()
        server = create_app(Settings(routes=routes, **settings), registry, logger=make_logger(log))
        client = await aiohttp_client(MendTestServer(server))
        return Mend(client, registry, log)

    return start


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist: a worker ended; keep the summary tables it sent (``tests/summaries.py``)."""
    summaries.collect(node.config, node)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    summaries.print_all(terminalreporter, config)
