"""What a worker tells operators besides history: its SDK's logs, Prometheus metrics and
traces.

Logs: a worker's client gets a `Runtime` (`worker_runtime`) that forwards sdk-core's
warnings and errors into Python logging, as records of the `temporalio.core` logger, so
they go where the process's own logs go. Left to itself core prints them on standard
output, where they land past a command's last line (the demo's `Demo finished.`).

Metrics: with `TARRY_METRICS_PORT` set, the worker's client gets a `Runtime` that
serves the SDK's metrics (task latencies, pollers, slots) and Tarry's own
(`activities.metrics`: model calls, latency, tokens and cost by profile and model,
tool calls by tool and outcome) at `http://TARRY_METRICS_HOST:PORT/metrics`. Only the
worker's client: a CLI process reading the same environment must not take the port.

Traces: with an OTLP endpoint in the standard `OTEL_*` variables (or `TARRY_TRACING=1`)
and the `otel` extra, the SDK's OpenTelemetry
interceptor spans every workflow and activity task, and `workers.tracing` adds one trace
per run with the GenAI spans of its model calls, tool calls, waits for people and
notifications, exported over OTLP/HTTP as the standard `OTEL_*` variables say.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Mapping

from temporalio.runtime import (
    LogForwardingConfig,
    LoggingConfig,
    PrometheusConfig,
    Runtime,
    TelemetryConfig,
)
from temporalio.worker import Interceptor

from tarry.config.settings import TarrySettings

__all__ = [
    "CORE_LOGGER",
    "TracingExtraMissing",
    "metrics_url",
    "tracing_interceptors",
    "tracing_on",
    "worker_runtime",
]

CORE_LOGGER = logging.getLogger("temporalio.core")
"""Where sdk-core's warnings and errors go, each message led by its Rust target."""

OTLP_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
"""The standard variables that say where spans go: naming one turns tracing on."""


class TracingExtraMissing(Exception):
    """`TARRY_TRACING` is on, and the `otel` extra that exports the spans is missing."""


def metrics_url(settings: TarrySettings) -> str | None:
    """Where the worker's metrics are scraped; None when they are off."""
    if settings.tarry_metrics_port is None:
        return None
    return f"http://{settings.tarry_metrics_host}:{settings.tarry_metrics_port}/metrics"


def worker_runtime(settings: TarrySettings) -> Runtime:
    """The runtime of a worker's client: sdk-core's logs forwarded to `CORE_LOGGER`, and
    Prometheus metrics served on the configured port when there is one.

    Raises the SDK's `ValueError` ("Failed starting Prometheus exporter: ...") for a port
    it cannot bind."""
    if settings.tarry_metrics_port is None:
        return _logging_runtime()
    address = f"{settings.tarry_metrics_host}:{settings.tarry_metrics_port}"
    # Counters as `_total` and durations in seconds: what Prometheus users expect.
    prometheus = PrometheusConfig(
        bind_address=address, counters_total_suffix=True, durations_as_seconds=True
    )
    return Runtime(telemetry=TelemetryConfig(logging=_forwarded_logs(), metrics=prometheus))


@functools.cache
def _logging_runtime() -> Runtime:
    # One per process, as the SDK's default is: each runtime has threads of its own.
    return Runtime(telemetry=TelemetryConfig(logging=_forwarded_logs()))


def _forwarded_logs() -> LoggingConfig:
    """The SDK's default levels (core's warnings, other crates' errors), forwarded."""
    forwarding = LogForwardingConfig(logger=CORE_LOGGER, append_target_to_name=False)
    return LoggingConfig(filter=LoggingConfig.default.filter, forwarding=forwarding)


def tracing_on(settings: TarrySettings, environ: Mapping[str, str] = os.environ) -> bool:
    """`TARRY_TRACING` when it is set; else whether the standard variables name an OTLP
    endpoint, as OpenTelemetry's own exporters read them. `OTEL_SDK_DISABLED=true` turns
    it off either way, as it does OpenTelemetry's SDK."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if settings.tarry_tracing is not None:
        return settings.tarry_tracing
    return any(environ.get(name, "").strip() for name in OTLP_ENDPOINTS)


def tracing_summary(settings: TarrySettings, environ: Mapping[str, str] = os.environ) -> str:
    """Whether the worker traces its runs and where the spans go, for `tarry dev`'s banner."""
    if not tracing_on(settings, environ):
        return "off (OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 sends traces there)"
    where = next((v for n in OTLP_ENDPOINTS if (v := environ.get(n, "").strip())), None)
    service = environ.get("OTEL_SERVICE_NAME") or "tarry-worker"
    return f"on: OTLP to {where or 'http://localhost:4318'}, as service {service}"


def tracing_interceptors(settings: TarrySettings) -> list[Interceptor]:
    """The SDK's tracing interceptor, exporting over OTLP, when tracing is on
    (`tracing_on`); none, and no OpenTelemetry imported, when it is off."""
    if not tracing_on(settings):
        return []
    try:
        from workers.tracing import tracing_interceptor
    except ImportError as e:
        raise TracingExtraMissing(
            "tracing is on (TARRY_TRACING, or an OTLP endpoint in OTEL_*) but the otel extra"
            f" is missing ({e.name} cannot be imported); install it with:"
            " pip install 'tarry[otel]'"
        ) from e
    return [tracing_interceptor(settings)]
