"""The bare proxy of ``bare_proxy.py`` on mend's own edge: the floor under mend's policy.

The same proxy (hop-by-hop headers dropped, bodies streamed both ways, nothing inspected), served
by mend's agent-side server (``proxy/edge/server``) and forwarding with mend's upstream client
(``proxy/edge/upstream``) instead of aiohttp's. What it costs is what mend's edge costs; what
mend costs above it is mend's request path (routes, request ids, protocols, the log line,
metrics, the circuit). Run only when named: ``bench/run --only bare-edge,...``.

    python bench/edge_proxy.py --upstream http://127.0.0.1:8081 --listen 127.0.0.1:8080
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

import structlog
import uvloop
from aiohttp import web
from yarl import URL

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bare_proxy import _forward_headers
from proxy.edge.failures import ProxyFailure
from proxy.edge.server import AgentServer, Limits, Listener
from proxy.edge.upstream import Pool, Timeouts

TIMEOUTS = Timeouts(connect=5.0, read=60.0)


class EdgeProxy:
    def __init__(self, upstream: str) -> None:
        url = URL(upstream)
        assert url.host is not None
        port = url.port or 80
        self.pool = Pool(url.host, port, host_header=f"{url.host}:{port}")

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        headers = _forward_headers(request.headers)
        headers.pop("Host", None)
        body = request.content.iter_any() if request.body_exists else None
        upstream = await self.pool.request(
            request.method, request.raw_path, headers, body, TIMEOUTS
        )
        try:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            response.headers.extend(_forward_headers(upstream.headers))
            await response.prepare(request)
            while chunk := await upstream.read():
                await response.write(chunk)
            await response.write_eof()
            return response
        finally:
            upstream.release()


def _refuse(_: web.BaseRequest, failure: ProxyFailure) -> web.StreamResponse:
    return web.Response(status=failure.status, text=str(failure))


async def serve(upstream: str, host: str, port: int) -> None:
    proxy = EdgeProxy(upstream)
    server = AgentServer(
        proxy,
        refuse=_refuse,
        limits=Limits(),
        max_connections=4096,
        max_per_client=None,
        log=structlog.get_logger(),
    )
    listener = Listener(server, shutdown_timeout=5.0)
    await listener.listen(host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await listener.close()
        await proxy.pool.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--upstream", required=True, help="base URL, e.g. http://127.0.0.1:8081")
    parser.add_argument("--listen", default="127.0.0.1:8080", help="HOST:PORT")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    uvloop.run(serve(args.upstream, host or "127.0.0.1", int(port)))


if __name__ == "__main__":
    main()
