"""The spans the workflow adds to a run's trace: one per wait for a person (for input,
an approval, a budget or a model), with who answered and how long it took; and, as the
run ends, its root span, which lasts from its start to its end.

Through the SDK's own support (`temporalio.contrib.opentelemetry.workflow.completed_span`
of the worker's tracing interceptor): a span is emitted only while the workflow is not
replaying, so a replay, a worker restart or an eviction emits it no second time. The
wait's start is kept in the run's memory (`RunMemory.wait`), so a wait that outlasts a
hand-over is still one span. A worker that does not trace has no such interceptor, and
nothing here imports OpenTelemetry then (a worker needs no extra unless it traces).
"""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from tarry.contracts import Phase, WaitingFor
    from tarry.contracts.waits import wait_kind
    from workflows import waits
    from workflows.memory import RunMemory, WaitMark

__all__ = ["ROOT_SPAN_EXTERN", "SPAN_EXTERN", "STARTED_NS", "began", "ended", "entered"]

SPAN_EXTERN = "__temporal_opentelemetry_completed_span"
"""The extern function the SDK's tracing interceptor gives a workflow: there, and only
there, is tracing on."""
ROOT_SPAN_EXTERN = "__tarry_trace_root_span"
"""The extern function a tracing worker gives a run to send its root span with (`ended`)."""
STARTED_NS = "tarry.started_ns"
"""An attribute `workers.tracing` takes as the span's start (the SDK's completed spans
start when they end), and drops."""


def entered(memory: RunMemory) -> None:
    """A phase change: a wait that ended gets its span; a wait that began is marked."""
    waiting = waits.recorded(memory)
    mark = memory.wait
    if mark is not None and (waiting is None or waiting.value != mark.waiting_for):
        _waited(memory, mark)
        memory.wait = None
    if waiting is not None and memory.wait is None:
        memory.wait = WaitMark(
            waiting_for=waiting.value, since=workflow.now(), turn=memory.conversation.turn
        )


def began(memory: RunMemory) -> None:
    """Marks when the run's chain began, for its root span: once, by its first run (a
    run handed over by a build before this field counts from its hand-over)."""
    if memory.started is None:
        memory.started = workflow.now()


def ended(memory: RunMemory) -> None:
    """The run's chain ends: its root span (`invoke_agent`), from its start to now, is
    sent now that it is known how long it lasted. A span is sent once, when it ends: sent
    at the start, the root would last no time, and the run's latency read as 0 ms."""
    if ROOT_SPAN_EXTERN not in workflow.extern_functions() or workflow.unsafe.is_replaying():
        return
    info = workflow.info()
    attributes: dict[str, str | int] = {
        "gen_ai.operation.name": "invoke_agent",
        "tarry.run_id": info.workflow_id,
        "tarry.phase": memory.phase.value,
        "tarry.turns": memory.conversation.turn,
        "temporalWorkflowID": info.workflow_id,
        "temporalRunID": info.run_id,
    }
    started = memory.started or info.start_time
    send = workflow.extern_functions()[ROOT_SPAN_EXTERN]
    send(
        info.workflow_id, info.first_execution_run_id, attributes, _ns(started), workflow.time_ns()
    )


def _waited(memory: RunMemory, mark: WaitMark) -> None:
    if SPAN_EXTERN not in workflow.extern_functions():
        return
    # Only a tracing worker gets here, and it has the `otel` extra.
    from temporalio.contrib.opentelemetry.workflow import completed_span

    now = workflow.now()
    last = memory.audit[-1] if memory.audit else None
    answered = last.by if last is not None and last.at >= mark.since else None
    attributes: dict[str, str | int | float] = {
        "tarry.run_id": workflow.info().workflow_id,
        "tarry.turn": mark.turn,
        "tarry.phase": Phase.WAITING_USER.value,
        "tarry.waiting_for": mark.waiting_for,
        "tarry.wait_seconds": (now - mark.since).total_seconds(),
        "tarry.next_phase": memory.phase.value,
        STARTED_NS: _ns(mark.since),
    }
    if answered is not None:
        attributes["tarry.answered_by"] = answered
    completed_span(wait_kind(WaitingFor(mark.waiting_for)).span, attributes=attributes)


def _ns(when: datetime) -> int:
    return int(when.timestamp() * 1_000_000_000)
