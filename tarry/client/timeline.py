"""A run's timeline (`tarry.contracts.timeline`), read from its Temporal history.

Each segment of the run's continue-as-new chain is one execution under the run's id; its
history holds what the timeline needs, so no trace store and no worker are asked:

- a model or tool call is an activity, from its scheduling to its end (a quick tool's
  local activity is a marker that records its own times); the model call's tokens and
  cost are in its result;
- a guardrail check is an activity too: its guardrails' names are in its input, what
  they did in its result (never the text: neither is kept in the span);
- a wait for a person runs from the `TarryWaitingFor` search attribute being set to it
  being unset or changed; who answered is the last person acting on the run meanwhile
  (a signal's or an update's `by`);
- a sub-agent is a child workflow, its tokens and cost those of its result; a remote
  A2A agent's requests are activities, each with the task it went to (the tokens the
  remote reports are in the lead's usage: a push may be what heard them).

The segments are found backwards from the newest: each one's start names the one it
continues. `GET /v1/runs/{id}/timeline`, `tarry show RUN --timeline` and the inbox read it.

A long run's history is long, and the inbox reads its timeline every 2 s while a person
has it open, so a read costs what changed, not what there is: a segment that handed over
never changes, so what the chain read up to its end is kept (`_HANDED_OVER`) and a later
read fetches and walks only the segments after it; the walk is linear (a wait finds who
answered it by bisection) and runs in a thread, off the event loop that serves requests.
"""

from __future__ import annotations

import asyncio
import bisect
import copy
import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.converter import DataConverter

from tarry.client.temporal_errors import translated_errors
from tarry.contracts import (
    CATALOGUE_CHECK_ACTIVITY,
    LLM_ACTIVITY,
    NOTIFY_ACTIVITY,
    PAGE_ACTIVITY,
    PAGE_INDEX_ACTIVITY,
    TOOL_CATALOGUE_ACTIVITY,
    WAITING_FOR_ATTRIBUTE,
    LlmResponse,
    RunResult,
    RunTimeline,
    SpanKind,
    SpanStatus,
    TimelineSpan,
    Usage,
    WaitingFor,
)
from tarry.contracts.a2a import (
    A2A_CANCEL_ACTIVITY,
    A2A_SEND_ACTIVITY,
    A2A_TASK_ACTIVITY,
    RemoteTask,
    RemoteTaskRef,
)
from tarry.contracts.guardrails import GUARDRAILS_ACTIVITY, Guarded, GuardRequest
from tarry.contracts.previews import PREVIEW_ACTIVITY

__all__ = ["read_timeline"]

_HOUSEKEEPING = frozenset(
    {
        TOOL_CATALOGUE_ACTIVITY,
        CATALOGUE_CHECK_ACTIVITY,
        PAGE_ACTIVITY,
        PAGE_INDEX_ACTIVITY,
        NOTIFY_ACTIVITY,
        PREVIEW_ACTIVITY,
    }
)
"""Activities that are the run's own bookkeeping, not a call of the model or a tool (a
gated call's preview, made as the run starts to wait for its decision)."""
_REMOTE_REQUESTS = frozenset({A2A_SEND_ACTIVITY, A2A_TASK_ACTIVITY, A2A_CANCEL_ACTIVITY})
"""A remote A2A agent's requests: a remote sub-agent's spans."""
_LOCAL_ACTIVITY_MARKER = "core_local_activity"
_CLOSE_EVENTS = frozenset(
    {
        "workflow_execution_completed_event_attributes",
        "workflow_execution_failed_event_attributes",
        "workflow_execution_timed_out_event_attributes",
        "workflow_execution_canceled_event_attributes",
        "workflow_execution_terminated_event_attributes",
        "workflow_execution_continued_as_new_event_attributes",
    }
)
_ACTIVITY_ENDS = {
    "activity_task_completed_event_attributes": SpanStatus.OK,
    "activity_task_failed_event_attributes": SpanStatus.FAILED,
    "activity_task_timed_out_event_attributes": SpanStatus.FAILED,
    "activity_task_canceled_event_attributes": SpanStatus.CANCELLED,
}
_CHILD_ENDS = {
    "child_workflow_execution_completed_event_attributes": SpanStatus.OK,
    "child_workflow_execution_failed_event_attributes": SpanStatus.FAILED,
    "child_workflow_execution_timed_out_event_attributes": SpanStatus.FAILED,
    "start_child_workflow_execution_failed_event_attributes": SpanStatus.FAILED,
    "child_workflow_execution_canceled_event_attributes": SpanStatus.CANCELLED,
    "child_workflow_execution_terminated_event_attributes": SpanStatus.CANCELLED,
}


@dataclass
class _Span:
    """A span while its segment is read: its end and numbers come later."""

    kind: SpanKind
    name: str
    start: datetime
    end: datetime | None = None
    status: SpanStatus = SpanStatus.OPEN
    attempts: int = 1
    usage: Usage | None = None
    waiting_for: WaitingFor | None = None
    by: str | None = None
    run_id: str | None = None
    task_id: str | None = None
    guardrails: list[str] | None = None
    verdict: str | None = None

    def close(self, at: datetime, status: SpanStatus) -> None:
        self.end, self.status = at, status


@dataclass
class _Chain:
    """The histories of a run's segments, read event by event into spans, oldest
    segment first (`segment` before each)."""

    started_at: datetime | None = None
    """When the chain's first segment started."""
    spans: list[_Span] = field(default_factory=list)
    calls: dict[int, _Span] = field(default_factory=dict)
    """The segment's activities and child workflows by the id of the event that
    scheduled them."""
    wait: _Span | None = None
    """The wait going on: a hand-over passes it on, as the next segment inherits the
    search attributes (it sets `TarryWaitingFor` again only when it changes)."""
    acts: list[tuple[datetime, str]] = field(default_factory=list)
    """(when, who) of each signal and update that names who sent it."""
    closed: datetime | None = None
    """When the run ended; None while it goes on (or handed over)."""

    handed_over: bool = False
    """Whether the segment read last ended by handing over to the next."""
    converter: DataConverter = field(default_factory=lambda: DataConverter.default)
    """How payloads are decoded: the reading client's."""

    def segment(self) -> None:
        self.calls, self.closed, self.handed_over = {}, None, False

    async def read(self, event: HistoryEvent) -> None:
        at = event.event_time.ToDatetime(UTC)
        if self.started_at is None:
            self.started_at = at
        kind = event.WhichOneof("attributes")
        if kind == "activity_task_scheduled_event_attributes":
            activity = event.activity_task_scheduled_event_attributes.activity_type.name
            if activity == GUARDRAILS_ACTIVITY:
                self._add(await self._check(event, at), event.event_id)
            elif activity in _REMOTE_REQUESTS:
                self._add(await self._remote_request(event, activity, at), event.event_id)
            elif activity not in _HOUSEKEEPING:
                span_kind = SpanKind.MODEL if activity == LLM_ACTIVITY else SpanKind.TOOL
                name = await self._summary(event) or activity
                self._add(_Span(span_kind, name, at), event.event_id)
        elif kind == "activity_task_started_event_attributes":
            started = event.activity_task_started_event_attributes
            if (span := self.calls.get(started.scheduled_event_id)) is not None:
                span.attempts = max(1, started.attempt)
        elif kind in _ACTIVITY_ENDS:
            await self._activity_ended(event, kind, at)
        elif kind == "marker_recorded_event_attributes":
            self._local_activity(event)
        elif kind == "upsert_workflow_search_attributes_event_attributes":
            self._waiting(event, at)
        elif kind == "workflow_execution_signaled_event_attributes":
            await self._act(at, event.workflow_execution_signaled_event_attributes.input.payloads)
        elif kind == "workflow_execution_update_accepted_event_attributes":
            request = event.workflow_execution_update_accepted_event_attributes.accepted_request
            await self._act(at, request.input.args.payloads)
        elif kind == "start_child_workflow_execution_initiated_event_attributes":
            child = event.start_child_workflow_execution_initiated_event_attributes.workflow_id
            span = _Span(SpanKind.AGENT, await self._summary(event) or child, at, run_id=child)
            self._add(span, event.event_id)
        elif kind in _CHILD_ENDS:
            await self._child_ended(event, kind, at)
        elif kind in _CLOSE_EVENTS:
            self._segment_closed(kind, at)

    def _add(self, span: _Span, event_id: int) -> None:
        self.spans.append(span)
        self.calls[event_id] = span

    async def _summary(self, event: HistoryEvent) -> str | None:
        """What the workflow named the step (`workflows.details`), when it did."""
        if not event.user_metadata.HasField("summary"):
            return None
        [summary] = await self.converter.decode([event.user_metadata.summary], [str])
        return str(summary) or None

    async def _check(self, event: HistoryEvent, at: datetime) -> _Span:
        """A guardrail check's span, named after where its guardrails looked and them."""
        payloads = event.activity_task_scheduled_event_attributes.input.payloads
        [request] = await self.converter.decode(payloads[:1], [GuardRequest])
        names = [g.name for g in request.guardrails]
        name = f"{request.point}: {', '.join(names)}"
        return _Span(SpanKind.GUARDRAIL, name, at, guardrails=names)

    async def _remote_request(self, event: HistoryEvent, activity: str, at: datetime) -> _Span:
        """A request to a remote A2A agent's span, with the task it goes to: a poll's or
        a cancel's names it, a message's answer does (`_activity_ended`)."""
        span = _Span(SpanKind.AGENT, await self._summary(event) or activity, at)
        if activity != A2A_SEND_ACTIVITY:
            payloads = event.activity_task_scheduled_event_attributes.input.payloads
            [ref] = await self.converter.decode(payloads[:1], [RemoteTaskRef])
            span.task_id = ref.task_id
        return span

    async def _activity_ended(self, event: HistoryEvent, kind: str, at: datetime) -> None:
        attributes = getattr(event, kind)
        span = self.calls.pop(attributes.scheduled_event_id, None)
        if span is None:
            return
        span.close(at, _ACTIVITY_ENDS[kind])
        if kind != "activity_task_completed_event_attributes":
            return
        payloads = attributes.result.payloads
        if span.kind is SpanKind.MODEL:
            [response] = await self.converter.decode(payloads[:1], [LlmResponse])
            span.usage = response.usage
        elif span.kind is SpanKind.GUARDRAIL:
            [guarded] = await self.converter.decode(payloads[:1], [Guarded])
            span.verdict = guarded.verdict
        elif span.kind is SpanKind.AGENT and payloads:  # a remote request; a cancel has none
            [task] = await self.converter.decode(payloads[:1], [RemoteTask])
            span.task_id = task.task_id

    async def _child_ended(self, event: HistoryEvent, kind: str, at: datetime) -> None:
        attributes = getattr(event, kind)
        span = self.calls.pop(attributes.initiated_event_id, None)
        if span is None:
            return
        span.close(at, _CHILD_ENDS[kind])
        if kind == "child_workflow_execution_completed_event_attributes":
            [result] = await self.converter.decode(attributes.result.payloads[:1], [RunResult])
            span.usage = result.usage

    def _local_activity(self, event: HistoryEvent) -> None:
        """A quick tool's call that ran as a local activity: its marker records when it
        was scheduled and when it completed (the summary is not kept)."""
        marker = event.marker_recorded_event_attributes
        if marker.marker_name != _LOCAL_ACTIVITY_MARKER or "data" not in marker.details:
            return
        data: dict[str, Any] = json.loads(marker.details["data"].payloads[0].data)
        activity = str(data.get("activity_type", ""))
        # A guardrail check was a local activity once: its marker keeps no input to name it.
        if activity in (*_HOUSEKEEPING, LLM_ACTIVITY, GUARDRAILS_ACTIVITY, ""):
            return
        end = _moment(data.get("complete_time")) or event.event_time.ToDatetime(UTC)
        start = min(_moment(data.get("original_schedule_time")) or end, end)
        span = _Span(SpanKind.TOOL, activity, start, attempts=max(1, data.get("attempt", 1)))
        span.close(end, SpanStatus.OK)
        self.spans.append(span)

    def _waiting(self, event: HistoryEvent, at: datetime) -> None:
        """A wait starts where the run sets `TarryWaitingFor`, and ends where it unsets
        or changes it."""
        fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes
        payload = fields.indexed_fields.get(WAITING_FOR_ATTRIBUTE.name)
        if payload is None:
            return
        value = json.loads(payload.data) if payload.data else None
        waiting_for = WaitingFor(value) if value else None
        if self.wait is not None and self.wait.waiting_for is waiting_for:
            return
        if self.wait is not None:
            self.wait.close(at, SpanStatus.OK)
            self.wait = None
        if waiting_for is not None:
            self.wait = _Span(SpanKind.WAIT, waiting_for.value, at, waiting_for=waiting_for)
            self.spans.append(self.wait)

    async def _act(self, at: datetime, payloads: Sequence[Payload]) -> None:
        """Notes who sent a signal or an update, when its payload names them."""
        if not payloads:
            return
        [value] = await self.converter.decode(payloads[:1])
        by = value.get("by") if isinstance(value, dict) else None
        if isinstance(by, str) and by:
            self.acts.append((at, by))

    def _segment_closed(self, kind: str, at: datetime) -> None:
        """Calls still open when their segment closed were cut short; a wait goes on
        past a hand-over, and is over when the run ends."""
        for span in self.calls.values():
            span.close(at, SpanStatus.CANCELLED)
        if kind == "workflow_execution_continued_as_new_event_attributes":
            self.handed_over = True
            return
        self.closed = at
        if self.wait is not None:
            self.wait.close(at, SpanStatus.OK)
            self.wait = None

    def finish(self) -> list[_Span]:
        """The spans, oldest first, each wait with who answered it: the last act within
        it, found by bisection in the acts, which history holds in time order."""
        times = [at for at, _ in self.acts]
        for span in self.spans:
            if span.kind is SpanKind.WAIT:
                after = bisect.bisect_left(times, span.start)
                until = len(times) if span.end is None else bisect.bisect_right(times, span.end)
                span.by = self.acts[until - 1][1] if until > after else None
        return sorted(self.spans, key=lambda span: span.start)


def _moment(value: object) -> datetime | None:
    """A protobuf timestamp as core's marker data writes it: `{seconds, nanos}`."""
    if not isinstance(value, dict) or "seconds" not in value:
        return None
    return datetime.fromtimestamp(value["seconds"] + value.get("nanos", 0) / 1e9, UTC)


_HANDED_OVER: OrderedDict[tuple[str, str], _Chain] = OrderedDict()
"""What a chain read up to the end of a segment that handed over, by (namespace, the
segment's run id), for the most recently read `_KEPT_CHAINS` of them."""
_KEPT_CHAINS = 256
_HANDED_OVER_LOCK = threading.Lock()  # reads keep chains from their threads (`_walk`)


def _copy(chain: _Chain) -> _Chain:
    """A copy of `chain` to read on, sharing its converter, which holds no state of it."""
    return copy.deepcopy(chain, {id(chain.converter): chain.converter})


async def _histories(
    client: Client, run_id: str
) -> tuple[_Chain, list[tuple[str, list[HistoryEvent]]]]:
    """The chain as read up to the newest segment that handed over and was kept (a new
    chain when none was), and the events of each segment after it, oldest first."""
    chain = _Chain(converter=client.data_converter)
    unread: list[tuple[str, list[HistoryEvent]]] = []
    async with translated_errors(run_id):
        segment: str | None = (await client.get_workflow_handle(run_id).describe()).run_id
        while segment:
            with _HANDED_OVER_LOCK:
                kept = _HANDED_OVER.get((client.namespace, segment))
                if kept is not None:
                    _HANDED_OVER.move_to_end((client.namespace, segment))
            if kept is not None:
                chain = _copy(kept)
                chain.converter = client.data_converter
                break
            handle = client.get_workflow_handle(run_id, run_id=segment)
            events = list((await handle.fetch_history()).events)
            unread.insert(0, (segment, events))
            started = events[0].workflow_execution_started_event_attributes
            segment = started.continued_execution_run_id or None
    return chain, unread


def _walk(chain: _Chain, unread: list[tuple[str, list[HistoryEvent]]], namespace: str) -> None:
    """Reads the `unread` segments' events into `chain`, keeping it at the end of each
    that handed over. It runs in a thread of its own: a long history is seconds of work
    that would hold up every request on the event loop."""

    async def walk() -> None:
        for segment, events in unread:
            chain.segment()
            for event in events:
                await chain.read(event)
            if chain.handed_over:
                kept = _copy(chain)
                with _HANDED_OVER_LOCK:
                    _HANDED_OVER[(namespace, segment)] = kept
                    while len(_HANDED_OVER) > _KEPT_CHAINS:
                        _HANDED_OVER.popitem(last=False)

    asyncio.run(walk())


async def read_timeline(client: Client, run_id: str) -> RunTimeline:
    """The timeline of run `run_id` across its whole chain, as of now; `RUN_NOT_FOUND`
    when there is no such run."""
    chain, unread = await _histories(client, run_id)
    await asyncio.to_thread(_walk, chain, unread, client.namespace)
    spans, closed = chain.finish(), chain.closed
    now = datetime.now(UTC)
    started_at = chain.started_at or now  # set by the first segment's first event
    return RunTimeline(
        run_id=run_id,
        started_at=started_at,
        now=now,
        duration_s=_seconds(started_at, closed or now),
        ended=closed is not None,
        spans=[_timeline_span(span, started_at, now) for span in spans],
    )


def _seconds(start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds())


def _timeline_span(span: _Span, started_at: datetime, now: datetime) -> TimelineSpan:
    usage = span.usage
    return TimelineSpan(
        kind=span.kind,
        name=span.name,
        start=span.start,
        end=span.end,
        offset_s=_seconds(started_at, span.start),
        duration_s=_seconds(span.start, span.end or now),
        status=span.status,
        attempts=span.attempts,
        tokens=usage.total_tokens if usage is not None else None,
        cost_usd=usage.cost_usd if usage is not None and usage.cost_usd else None,
        cached=span.kind is SpanKind.MODEL and usage is not None and usage.cached_calls > 0,
        waiting_for=span.waiting_for,
        by=span.by,
        run_id=span.run_id,
        task_id=span.task_id,
        guardrails=span.guardrails,
        verdict=span.verdict,
    )
