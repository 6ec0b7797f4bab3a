"""A worker's traces: the SDK's OpenTelemetry tracing interceptor, one trace per run,
and the GenAI spans of `activities.traces` and `workflows.traces`, exported over OTLP.

Needs the `otel` extra: `workers.telemetry` imports this module only when
`TARRY_TRACING` is on, so a worker without tracing never needs OpenTelemetry.

Everything is configured by the OpenTelemetry SDK's standard variables, read by the
SDK itself: where to (`OTEL_EXPORTER_OTLP_ENDPOINT` or `..._TRACES_ENDPOINT`, by
default `http://localhost:4318`), with which headers (`OTEL_EXPORTER_OTLP_HEADERS`),
as which service (`OTEL_SERVICE_NAME`, by default `tarry-worker`), which traces
(`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`) and how often a batch is sent
(`OTEL_BSP_*`).

Why the SDK's `TracingInterceptor` (and not its experimental `OpenTelemetryPlugin`):
it emits a workflow's spans only while the workflow is not replaying, the one thing a
durable run's telemetry must get right, and it is stable. Two things are added here, by
subclassing it as its documentation says to:

- One trace per run. A run is started by clients that do not trace (the CLI, the HTTP
  API, a schedule), so the SDK would begin a new trace at every workflow task. Here a
  run without a trace context gets one made from its workflow id and first run id: the
  same on every replay and worker, and handed to the next run of its chain at a
  hand-over and to its sub-agents by the SDK. Its root is an `invoke_agent` span, sent as
  the run ends, from its start (`workflows.traces.ended`). Tarry's internal workflows (a
  client's catalogue check before a start) get a context that is never sampled, and an
  activity no workflow started (the same check, as a standalone activity) no span: no
  trace.
- Spans that last: the SDK's completed spans from workflow code begin when they end; a
  wait for a person says when it began (`workflows.traces.STARTED_NS`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Any

import opentelemetry.context
import opentelemetry.trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.trace import SpanKind, Status, StatusCode
from temporalio import activity, workflow
from temporalio.contrib.opentelemetry import TracingInterceptor, TracingWorkflowInboundInterceptor
from temporalio.contrib.opentelemetry._interceptor import _CompletedWorkflowSpanParams
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    HandleQueryInput,
    WorkflowInterceptorClassInput,
)

from activities import traces
from tarry.config.settings import TarrySettings
from tarry.contracts import WORKFLOW_TYPE
from workers.trace_content import WithoutContent
from workflows.traces import ROOT_SPAN_EXTERN, STARTED_NS

__all__ = ["RunTracing", "tracing_interceptor"]

ROOT_EXTERN = "__tarry_trace_root"
"""The extern function that makes a run's trace context: its root span's ids."""
_Carrier = dict[str, str | list[str]]
"""A trace context as the SDK's interceptor carries it in a header."""
_forced_ids: ContextVar[tuple[int, int] | None] = ContextVar("tarry_forced_ids", default=None)


def tracing_interceptor(settings: TarrySettings) -> RunTracing:
    """The interceptor to give the worker, with this process's activities traced too."""
    service = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "tarry-worker"}
    provider = TracerProvider(resource=Resource.create(service), id_generator=_RunIds())
    content = settings.tarry_trace_content
    exporter = OTLPSpanExporter()
    provider.add_span_processor(
        BatchSpanProcessor(exporter if content else WithoutContent(exporter))
    )
    tracer = provider.get_tracer("tarry")
    traces.use(_Recorder(tracer, content=content))
    # Workflows are started by clients that do not trace: span them all the same.
    return RunTracing(tracer, provider)


class _RunIds(RandomIdGenerator):
    """Random ids, but for a run's root span: those are made from the run (`_root_ids`)."""

    def generate_span_id(self) -> int:
        forced = _forced_ids.get()
        return forced[1] if forced else super().generate_span_id()

    def generate_trace_id(self) -> int:
        forced = _forced_ids.get()
        return forced[0] if forced else super().generate_trace_id()


def _root_ids(workflow_id: str, first_run_id: str) -> tuple[int, int]:
    digest = hashlib.sha256(f"{workflow_id}\0{first_run_id}".encode()).digest()
    return int.from_bytes(digest[:16], "big") or 1, int.from_bytes(digest[16:24], "big") or 1


def _a_run() -> bool:
    """Whether the workflow is an agent run (which has a root of its own), not one of
    Tarry's internal workflows (a client's catalogue check)."""
    return workflow.info().workflow_type == WORKFLOW_TYPE


class RunTracing(TracingInterceptor):
    """The SDK's interceptor with a trace per run (see the module)."""

    def __init__(self, tracer: opentelemetry.trace.Tracer, provider: TracerProvider) -> None:
        super().__init__(tracer, always_create_workflow_spans=True)
        self._provider = provider

    def shutdown(self) -> None:
        """Sends the spans not sent yet and stops tracing this process's activities (at
        exit, the provider sends them by itself)."""
        traces.use(None)
        self._provider.shutdown()

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _RunActivities(super().intercept_activity(next), next)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[TracingWorkflowInboundInterceptor]:
        super().workflow_interceptor_class(input)
        input.unsafe_extern_functions[ROOT_EXTERN] = self._root
        input.unsafe_extern_functions[ROOT_SPAN_EXTERN] = self._root_span
        return _RunInterceptor

    def _root(self, workflow_id: str, first_run_id: str, *, internal: bool) -> dict[str, str]:
        """The run's trace context, made from its ids: the same on every replay. Of one
        of Tarry's `internal` workflows (a client's catalogue check), a context that is
        never sampled: none of its spans is recorded, so it adds no trace beside the runs."""
        trace_id, span_id = _root_ids(workflow_id, first_run_id)
        sampled = not internal and self._sampled(trace_id)
        flags = opentelemetry.trace.TraceFlags(0x01 if sampled else 0x00)
        context = opentelemetry.trace.SpanContext(trace_id, span_id, True, flags)
        carrier: dict[str, str] = {}
        parent = opentelemetry.trace.NonRecordingSpan(context)
        self.text_map_propagator.inject(carrier, opentelemetry.trace.set_span_in_context(parent))
        return carrier

    def _sampled(self, trace_id: int) -> bool:
        """The configured sampler decides, as it would for a root span: by the trace id."""
        decision = self._provider.sampler.should_sample(None, trace_id, "invoke_agent").decision
        return decision is Decision.RECORD_AND_SAMPLE

    def _root_span(
        self,
        workflow_id: str,
        first_run_id: str,
        attributes: Mapping[str, Any],
        start_ns: int,
        end_ns: int,
    ) -> None:
        """Sends the root span of a run whose chain ended (`workflows.traces.ended`),
        from its start to its end, if the run's trace is its own: a sub-agent's, or a
        run's that a tracing client started, belongs to the trace it was started in."""
        trace_id, span_id = _root_ids(workflow_id, first_run_id)
        current = opentelemetry.trace.get_current_span().get_span_context()
        if (current.trace_id, current.span_id) != (
            trace_id,
            span_id,
        ) or not current.trace_flags.sampled:
            return
        token = _forced_ids.set((trace_id, span_id))
        try:
            span = self.tracer.start_span(
                f"invoke_agent {workflow_id}",
                opentelemetry.context.Context(),
                kind=SpanKind.INTERNAL,
                attributes=dict(attributes),
                start_time=start_ns,
            )
        finally:
            _forced_ids.reset(token)
        span.end(end_time=end_ns)

    def _completed_workflow_span(self, params: _CompletedWorkflowSpanParams) -> Any:
        attributes = dict(params.attributes or {})
        started = attributes.pop(STARTED_NS, None)
        if not isinstance(started, int):
            return super()._completed_workflow_span(params)
        # A span of the workflow's that lasted: from `started` to the workflow's now.
        context = self.text_map_propagator.extract(params.context)
        span = self.tracer.start_span(
            params.name, context, attributes=attributes, start_time=started, kind=params.kind
        )
        span.end(end_time=params.time_ns)
        return None


class _RunActivities(ActivityInboundInterceptor):
    """The SDK's activity spans, for the activities of workflows only: an activity that no
    workflow started (a client's catalogue check before a start, as a standalone activity)
    would begin a trace of its own beside the runs', from a client that does not trace."""

    def __init__(self, traced: ActivityInboundInterceptor, untraced: ActivityInboundInterceptor):
        super().__init__(traced)
        self._untraced = untraced

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        if activity.info().workflow_id:
            return await self.next.execute_activity(input)
        return await self._untraced.execute_activity(input)


class _RunInterceptor(TracingWorkflowInboundInterceptor):
    """The SDK's workflow interceptor, with the run's own trace context when no client
    gave it one (see the module)."""

    def _load_workflow_context_carrier(self) -> _Carrier | None:
        if carrier := super()._load_workflow_context_carrier():
            return carrier
        self._workflow_context_carrier = self._root()
        return self._workflow_context_carrier

    async def handle_query(self, input: HandleQueryInput) -> Any:
        """A query of a client that does not trace is no span: the inbox and the CLI
        poll a run's state every few seconds, and each would be a trace of its own."""
        if self.header_key not in input.headers:
            return await self.next.handle_query(input)
        return await super().handle_query(input)

    def _root(self) -> _Carrier:
        info = workflow.info()
        root = self._extern_functions[ROOT_EXTERN]  # type: ignore[literal-required]
        carrier: _Carrier = root(
            info.workflow_id, info.first_execution_run_id, internal=not _a_run()
        )
        return carrier


@dataclasses.dataclass
class _Span:
    span: opentelemetry.trace.Span
    content: bool
    """Whether a failure's message may go into the span (`workers.trace_content`)."""

    def set_attributes(self, attributes: traces.Attributes) -> None:
        self.span.set_attributes(attributes)

    def failed(self, error: BaseException) -> None:
        if isinstance(error, ApplicationError) and error.type:
            kind = error.type
        else:
            kind = type(error).__name__
        self.span.set_attribute("error.type", kind)
        self.span.set_status(Status(StatusCode.ERROR, str(error)[:300] if self.content else kind))


class _Recorder:
    """`activities.traces.Recorder` on an OpenTelemetry tracer."""

    def __init__(self, tracer: opentelemetry.trace.Tracer, *, content: bool) -> None:
        self._tracer = tracer
        self.content = content

    def span(self, name: str, attributes: traces.Attributes) -> AbstractContextManager[_Span]:
        return self._span(name, attributes)

    @contextmanager
    def _span(self, name: str, attributes: traces.Attributes) -> Iterator[_Span]:
        kind = SpanKind.CLIENT if name.startswith("chat ") else SpanKind.INTERNAL
        # `_Span.failed` sets the status: OpenTelemetry's own would say the message.
        with self._tracer.start_as_current_span(
            name, kind=kind, attributes=attributes, set_status_on_exception=False
        ) as span:
            yield _Span(span, self.content)

    def mark_http_status(self, status: int) -> None:
        opentelemetry.trace.get_current_span().set_attribute("http.response.status_code", status)

    def mark_first_token(self) -> None:
        span = opentelemetry.trace.get_current_span()
        if not isinstance(span, ReadableSpan) or span.start_time is None:
            return
        if "tarry.time_to_first_token_s" in (span.attributes or {}):
            return
        first = (time.time_ns() - span.start_time) / 1e9
        opentelemetry.trace.get_current_span().set_attribute("tarry.time_to_first_token_s", first)
