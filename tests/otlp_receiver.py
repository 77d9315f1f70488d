"""A real OTLP/HTTP traces receiver for tests: an aiohttp server on loopback that decodes each
``ExportTraceServiceRequest`` with ``opentelemetry-proto`` and keeps the spans, with their
resource's attributes."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

SERVER = Span.SpanKind.SPAN_KIND_SERVER
CLIENT = Span.SpanKind.SPAN_KIND_CLIENT
ERROR = Status.StatusCode.STATUS_CODE_ERROR
UNSET = Status.StatusCode.STATUS_CODE_UNSET
#: Bytes of one export request the receiver accepts.
MAX_BODY = 4 << 20


def value(any_value: AnyValue) -> Any:
    """An attribute's value as Python."""
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind is not None else None


@dataclass(frozen=True)
class Received:
    """One span as the receiver decoded it."""

    span: Span
    resource: dict[str, Any]

    @property
    def name(self) -> str:
        return self.span.name

    @property
    def kind(self) -> int:
        return self.span.kind

    @property
    def trace_id(self) -> str:
        return self.span.trace_id.hex()

    @property
    def span_id(self) -> str:
        return self.span.span_id.hex()

    @property
    def parent_id(self) -> str:
        return self.span.parent_span_id.hex()

    @property
    def status(self) -> int:
        return self.span.status.code

    @property
    def attributes(self) -> dict[str, Any]:
        return {kv.key: value(kv.value) for kv in self.span.attributes}


@dataclass
class Receiver:
    """The spans received so far; ``wait`` for a number of them."""

    url: str = ""
    spans: list[Received] = field(default_factory=list)
    requests: int = 0
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        try:
            export = ExportTraceServiceRequest.FromString(body)
        except DecodeError:
            return web.Response(status=400)
        self.requests += 1
        for resource_spans in export.resource_spans:
            resource = {kv.key: value(kv.value) for kv in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                self.spans.extend(Received(span, resource) for span in scope.spans)
        self._arrived.set()
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    async def wait(self, count: int, within: float = 10.0) -> list[Received]:
        """At least ``count`` spans, or ``TimeoutError`` after ``within`` seconds."""
        async with asyncio.timeout(within):
            while len(self.spans) < count:
                self._arrived.clear()
                await self._arrived.wait()
        return self.spans

    def one(self, kind: int) -> Received:
        """The one span of ``kind`` received (fails when there are none or several)."""
        found = [span for span in self.spans if span.kind == kind]
        assert len(found) == 1, [span.name for span in self.spans]
        return found[0]


def app(receiver: Receiver) -> web.Application:
    application = web.Application(client_max_size=MAX_BODY)
    application.router.add_post("/v1/traces", receiver.handle)
    return application
