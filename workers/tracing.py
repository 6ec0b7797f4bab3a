"""The SDK's OpenTelemetry tracing interceptor, exporting over OTLP/HTTP.

Needs the `otel` extra: `workers.telemetry` imports this module only when
`TARRY_TRACING` is on, so a worker without tracing never needs OpenTelemetry.
"""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from temporalio.contrib.opentelemetry import TracingInterceptor


def tracing_interceptor() -> TracingInterceptor:
    """Spans for every workflow and activity task, sent to where the standard
    `OTEL_EXPORTER_OTLP_*` variables say (by default `http://localhost:4318`)."""
    provider = TracerProvider(resource=Resource.create({"service.name": "tarry-worker"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    # Workflows are started by clients that do not trace: span them all the same.
    return TracingInterceptor(provider.get_tracer("tarry"), always_create_workflow_spans=True)
