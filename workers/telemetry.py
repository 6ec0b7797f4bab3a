"""What a worker tells operators besides history: Prometheus metrics and traces.

Metrics: with `TARRY_METRICS_PORT` set, the worker's client gets a `Runtime` that
serves the SDK's metrics (task latencies, pollers, slots) and Tarry's own
(`activities.metrics`: model calls, latency, tokens and cost by profile and model,
tool calls by tool and outcome) at `http://TARRY_METRICS_HOST:PORT/metrics`. Only the
worker's client: a CLI process reading the same environment must not take the port.

Traces: with `TARRY_TRACING=1` and the `otel` extra, the SDK's OpenTelemetry
interceptor spans every workflow and activity task, and `workers.tracing` adds one trace
per run with the GenAI spans of its model calls, tool calls, waits for people and
notifications, exported over OTLP/HTTP as the standard `OTEL_*` variables say.
"""

from __future__ import annotations

from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import Interceptor

from tarry.settings import TarrySettings

__all__ = ["TracingExtraMissing", "metrics_runtime", "metrics_url", "tracing_interceptors"]


class TracingExtraMissing(Exception):
    """`TARRY_TRACING` is on, and the `otel` extra that exports the spans is missing."""


def metrics_url(settings: TarrySettings) -> str | None:
    """Where the worker's metrics are scraped; None when they are off."""
    if settings.tarry_metrics_port is None:
        return None
    return f"http://{settings.tarry_metrics_host}:{settings.tarry_metrics_port}/metrics"


def metrics_runtime(settings: TarrySettings) -> Runtime | None:
    """A runtime serving Prometheus metrics on the configured port; None when off."""
    if settings.tarry_metrics_port is None:
        return None
    address = f"{settings.tarry_metrics_host}:{settings.tarry_metrics_port}"
    # Counters as `_total` and durations in seconds: what Prometheus users expect.
    prometheus = PrometheusConfig(
        bind_address=address, counters_total_suffix=True, durations_as_seconds=True
    )
    return Runtime(telemetry=TelemetryConfig(metrics=prometheus))


def tracing_interceptors(settings: TarrySettings) -> list[Interceptor]:
    """The SDK's tracing interceptor, exporting over OTLP, when `TARRY_TRACING` is on."""
    if not settings.tarry_tracing:
        return []
    try:
        from workers.tracing import tracing_interceptor
    except ImportError as e:
        raise TracingExtraMissing(
            f"TARRY_TRACING is on but the otel extra is missing ({e.name} cannot be "
            "imported); install it with: pip install 'tarry[otel]'"
        ) from e
    return [tracing_interceptor(settings)]
