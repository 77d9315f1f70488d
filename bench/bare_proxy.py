"""The smallest honest aiohttp reverse proxy: the baseline mend is compared with.

It does what any aiohttp proxy must do and nothing more: one pooled ClientSession, bodies
streamed both ways without decompression, hop-by-hop headers dropped. Whatever mend costs on
top of this is the price of mend itself, not of aiohttp or the interpreter.

    python bench/bare_proxy.py --upstream http://127.0.0.1:8081 --listen 127.0.0.1:8080 [--uvloop]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal

from aiohttp import ClientSession, TCPConnector, web
from aiohttp.abc import AbstractStreamWriter
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

# RFC 9110 section 7.6.1, plus the de-facto ones every proxy strips.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)


def _forward_headers(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    drop = set(HOP_BY_HOP)
    # Headers named in Connection are hop-by-hop for this message only.
    for value in headers.getall("Connection", ()):
        drop.update(token.strip().lower() for token in value.split(","))
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in drop)


class BareProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = URL(upstream)
        self.session: ClientSession | None = None

    async def start(self) -> None:
        self.session = ClientSession(
            connector=TCPConnector(limit=1024, keepalive_timeout=300),
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding"),
        )

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        assert self.session is not None
        headers = _forward_headers(request.headers)
        headers.pop("Host", None)
        url = self.upstream.join(URL(request.path_qs, encoded=True))
        body = request.content if request.body_exists else None
        async with self.session.request(
            request.method, url, headers=headers, data=body, allow_redirects=False
        ) as upstream:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            response.headers.extend(_forward_headers(upstream.headers))
            writer: AbstractStreamWriter | None = await response.prepare(request)
            assert writer is not None
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response


async def serve(upstream: str, host: str, port: int) -> None:
    proxy = BareProxy(upstream)
    await proxy.start()
    server = web.Server(proxy, access_log=None)
    runner = web.ServerRunner(server, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=4096, reuse_address=True)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        await proxy.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--upstream", required=True, help="base URL, e.g. http://127.0.0.1:8081")
    parser.add_argument("--listen", default="127.0.0.1:8080", help="HOST:PORT")
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop instead of asyncio")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    coro = serve(args.upstream, host or "127.0.0.1", int(port))
    with contextlib.suppress(KeyboardInterrupt):
        if args.uvloop:
            # Imported only on request so the proxy also runs where uvloop is not installed.
            import uvloop  # noqa: PLC0415

            uvloop.run(coro)
        else:
            asyncio.run(coro)


if __name__ == "__main__":
    main()
