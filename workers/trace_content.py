"""What a worker's spans say of a failure while content is not traced
(`TARRY_TRACE_CONTENT` off, the default).

A failure's message is content: a provider's error body (which may echo the prompt it
was sent), a model's malformed answer quoted back, a tool's error. So with content off a
span names a failure by its type alone: `error.type` (a Tarry `ErrorCode` on Tarry's
spans), the HTTP status a model answered (`http.response.status_code`), the status's
description cut to its leading type name, and an `exception` event's `exception.type`,
never its message or stack trace. `WithoutContent` applies this at the last door, the
exporter, so that it holds for the SDK's own spans too (`RunActivity:…`,
`RunWorkflow:…`), which record an exception's message and stack trace as they see fit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Status

__all__ = ["WithoutContent"]

_TYPE_NAME = re.compile(r"[A-Za-z_][\w.]*")
"""A status description that is a type's name (`LLM_HTTP_ERROR`, `ApplicationError`)."""
_EXCEPTION_KEPT = frozenset({"exception.type", "exception.escaped"})
"""What an `exception` event keeps: not `exception.message`, not `exception.stacktrace`."""


class WithoutContent(SpanExporter):
    """Exports through `exporter` each span without the words of its failures."""

    def __init__(self, exporter: SpanExporter) -> None:
        self._exporter = exporter

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self._exporter.export([_without_content(s) for s in spans])

    def shutdown(self) -> None:
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._exporter.force_flush(timeout_millis)


def _without_content(span: ReadableSpan) -> ReadableSpan:
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=span.attributes,
        events=[_event(e) for e in span.events],
        links=span.links,
        kind=span.kind,
        status=_status(span.status),
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def _status(status: Status) -> Status:
    """The status with its description cut to the type it starts with (`Type: message`)."""
    head = (status.description or "").split(":", 1)[0].strip()
    return Status(status.status_code, head if _TYPE_NAME.fullmatch(head) else None)


def _event(event: Event) -> Event:
    if event.name != "exception":
        return event
    kept = {k: v for k, v in (event.attributes or {}).items() if k in _EXCEPTION_KEPT}
    return Event(event.name, kept, event.timestamp)
