"""WebSocket sessions on the request path: the upstream's 101 to the agent, then a byte tunnel
until a side closes or falls idle (``proxy/edge/tunnel.py``). Logged and counted when the 101 is
sent (outcome ``websocket``) and again when the session ends (``websocket_closed``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from structlog.typing import FilteringBoundLogger

from proxy.edge import relay
from proxy.edge.failures import ProxyFailure
from proxy.edge.passthrough import passthrough_headers
from proxy.edge.tunnel import Tunnel
from proxy.observation.metrics import Metrics
from proxy.runtime.record import Recorder

if TYPE_CHECKING:
    from proxy.runtime.flow import Flow


class WebSockets:
    """The sessions being relayed, ended first when mend shuts down."""

    def __init__(self, metrics: Metrics, log: FilteringBoundLogger, recorder: Recorder) -> None:
        self.metrics = metrics
        self.log = log
        self.recorder = recorder
        self.tunnels: set[Tunnel] = set()
        self.stopping = False

    async def relay(self, flow: Flow) -> None:
        """The session of a request the upstream switched to WebSocket, to its end."""
        upstream, runtime, route = flow.upstream, flow.runtime, flow.exchange.route
        assert upstream is not None
        assert runtime is not None
        metrics = self.metrics
        counts = (
            metrics.websocket_bytes.labels(route, "to_upstream"),
            metrics.websocket_bytes.labels(route, "to_agent"),
        )
        try:
            tunnel = Tunnel(
                flow.request, upstream, idle_timeout=runtime.route.idle_timeout, counts=counts
            )
        except ProxyFailure:  # a 101 that cannot be relayed
            upstream.close()
            raise
        flow.exchange.status = upstream.status
        self.tunnels.add(tunnel)
        if self.stopping:  # switched as mend began to stop: the session ends as it opens
            tunnel.stop()
        try:
            with metrics.websocket_open.labels(route).track_inprogress():
                headers = passthrough_headers(upstream.headers, flow.request_id)
                response = await tunnel.open(headers)
                flow.request[relay.STARTED] = True
                metrics.websocket_sessions.labels(route).inc()
                flow.answered(response, "websocket")
                self.recorder.finished(flow)
                await tunnel.run()
        finally:
            self.tunnels.discard(tunnel)
            self._closed(flow, tunnel)

    def _closed(self, flow: Flow, tunnel: Tunnel) -> None:
        session = tunnel.summary()
        route = flow.exchange.route
        self.metrics.websocket_closed.labels(route, session.closed_by.value).inc()
        self.log.info(
            "websocket_closed",
            request_id=flow.request_id,
            route=route,
            path=flow.exchange.path,
            closed_by=session.closed_by.value,
            duration_ms=round(session.duration_s * 1000, 3),
            bytes_to_upstream=session.to_upstream,
            bytes_to_agent=session.to_agent,
        )

    def stop(self) -> None:
        """End every session, and those still opening: one has no request boundary to drain
        to."""
        self.stopping = True
        for tunnel in list(self.tunnels):
            tunnel.stop()
