"""The cost of tracing a turn (issue #35, item 6): Tarry's worker with `TARRY_TRACING=1`,
exporting every span over OTLP/HTTP to a real receiver on this machine, against the same
worker with tracing off. The receiver is a small HTTP server that takes the exporter's
protobuf requests and counts the spans in them, so the row shows that spans were sent."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tarry.cli.processes import HOST


class Receiver:
    """Takes OTLP/HTTP trace exports at `/v1/traces` and counts their spans."""

    def __init__(self) -> None:
        self.spans = 0
        app = web.Application()
        app.router.add_post("/v1/traces", self._export)
        self._runner = web.AppRunner(app)

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self._runner.addresses[0][1]}"

    async def _export(self, request: web.Request) -> web.Response:
        export = ExportTraceServiceRequest.FromString(await request.read())
        self.spans += sum(
            len(scope.spans) for resource in export.resource_spans for scope in resource.scope_spans
        )
        body = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")


@asynccontextmanager
async def receiver() -> AsyncIterator[Receiver]:
    served = Receiver()
    await served._runner.setup()
    await web.TCPSite(served._runner, HOST, 0).start()
    try:
        yield served
    finally:
        await served._runner.cleanup()


@contextmanager
def tracing_to(endpoint: str) -> Iterator[None]:
    """`TARRY_TRACING=1` and the standard variables, as an operator sets them, while a
    worker is built in this process (the exporter reads them then)."""
    variables = {"TARRY_TRACING": "1", "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
    before = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
