"""Reading the audit trail back from the runs' histories (`tarry.contracts.audit`).

A run writes its own records (`workflows.audit`) and keeps only its current segment's:
each segment of its continue-as-new chain is one execution under the run's id, and its
records are in the event that closes it, the hand-over to the next segment (`audit` of
the next input) or the run's result. So one event per ended segment is read, without a
worker, and only a segment still open (or one ended some other way, such as terminated)
is asked with the `audit` query. Visibility finds the segments: of one run, or of every
run that was open at or after `since`.

A segment that cannot answer (no worker serves it, its workflow task fails, it does not
answer within `SEGMENT_PATIENCE`) is left out and its run named (`AuditTrail.unread`):
one stuck run never keeps the trail of every other from being read.

The HTTP API (`GET /v1/audit`), `tarry audit` and `Tarry.audit` answer the same records.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from pydantic import TypeAdapter
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowHistoryEventFilterType,
)
from temporalio.common import TypedSearchAttributes
from temporalio.service import RPCError

from tarry.client.delivery import Delivery
from tarry.client.temporal_errors import translated_errors
from tarry.contracts import (
    AUDIT_ACT_WORKFLOW,
    AUDIT_QUERY,
    WORKFLOW_TYPE,
    AuditRecord,
    AuditTrail,
    ErrorCode,
    OtherAct,
    RunResult,
    UnreadRun,
    run_id_problem,
)
from tarry.contracts.audit import AUDIT_LIMIT
from tarry.core.errors import TarryError

__all__ = ["AUDIT_LIMIT", "find_audit", "record_act", "visibility_time"]

_READERS = 8
"""Segments read at once."""
SEGMENT_PATIENCE = 20.0
"""Seconds one segment may take to answer before the read goes on without it: longer than
the client takes to tell that no worker serves a run (`tarry.client.delivery`)."""
_RECORDS = TypeAdapter(list[AuditRecord])
EPOCH_YEAR = 1970
"""No run closed before it."""


def audit_query(
    run: str | None,
    since: datetime | None,
    readable: str | None = None,
    task_queue: str | None = None,
) -> str:
    """The visibility query for the segments whose records may be wanted: of run `run`
    (None: any), open at or after `since` (None: whenever), those `readable` only, on
    `task_queue` (None: any). A run id is checked against the id rule, which has no
    quote, so nothing a person types can change the query."""
    # A run's own records; across runs, those of the acts on schedules and evals too.
    kinds = [WORKFLOW_TYPE] if run is not None else [WORKFLOW_TYPE, AUDIT_ACT_WORKFLOW]
    query = f"WorkflowType IN ({', '.join(repr(kind) for kind in kinds)})"
    if task_queue is not None:
        query += f" AND TaskQueue = '{task_queue}'"
    if run is not None:
        if problem := run_id_problem(run):
            raise TarryError(ErrorCode.RUN_ID_INVALID, problem)
        query += f" AND WorkflowId = '{run}'"
    if since is not None and (at := visibility_time(since)) is not None:
        query += f" AND (ExecutionStatus = 'Running' OR CloseTime >= '{at}')"
    if readable is not None:
        query += f" AND {readable}"
    return query


def visibility_time(moment: datetime) -> str | None:
    """`moment` as visibility reads a time (UTC, RFC 3339); None for one before any run
    or at the very ends of the calendar, where no clause is needed (the records are
    filtered by time as they are read anyway)."""
    try:
        utc = moment.astimezone(UTC)
    except (OverflowError, ValueError):
        return None
    return utc.isoformat() if utc.year >= EPOCH_YEAR else None


async def find_audit(
    client: Client,
    *,
    run: str | None = None,
    user: str | None = None,
    since: datetime | None = None,
    limit: int = AUDIT_LIMIT,
    readable: str | None = None,
    task_queue: str | None = None,
) -> AuditTrail:
    """The first `limit` records, oldest first, of run `run` (None: every run), of acts
    by `user` (None: anyone's), at or after `since` (None: all), each naming its run;
    `readable`: of the runs a caller may read only (`Policy.readable_clause`); of the
    runs on `task_queue` only (None: any); and the runs a segment of which could not
    be read (`unread`). `RUN_NOT_FOUND` for a run id no run has."""
    query = audit_query(run, since, readable, task_queue)
    segments = [e async for e in client.list_workflows(query)]
    if run is not None and not segments:
        async with translated_errors(run):  # visibility lags a start: ask the run itself
            segments = [await client.get_workflow_handle(run).describe()]
    gate = asyncio.Semaphore(_READERS)

    async def read(segment: WorkflowExecution) -> list[AuditRecord] | UnreadRun:
        async with gate:
            return await _readable_records(client, segment)

    found = await asyncio.gather(*(read(s) for s in segments))
    records = [r for f in found if isinstance(f, list) for r in f if _wanted(r, user, since)]
    records.sort(key=lambda r: r.at)
    unread = {f.run: f for f in found if isinstance(f, UnreadRun)}
    return AuditTrail(records=records[:limit], unread=list(unread.values()))


async def record_act(
    client: Client, act: OtherAct, task_queue: str, access: TypedSearchAttributes
) -> None:
    """Records `act`, on a schedule or an eval, in the trail (`AUDIT_ACT_WORKFLOW`): with
    `access`, the owner and share of what it changed, so the people who may read that
    may read its record. Taken once Temporal has it; a worker on `task_queue` writes it."""
    await client.start_workflow(
        AUDIT_ACT_WORKFLOW,
        act,
        id=f"audit-{act.act.replace('_', '-')}-{uuid.uuid4().hex[:12]}",
        task_queue=task_queue,
        search_attributes=access,
        static_summary=act.what,
    )


def _wanted(record: AuditRecord, user: str | None, since: datetime | None) -> bool:
    return (user is None or record.by == user) and (since is None or record.at >= since)


async def _readable_records(
    client: Client, segment: WorkflowExecution
) -> list[AuditRecord] | UnreadRun:
    """The records of one segment, or why they cannot be read now."""
    try:
        async with asyncio.timeout(SEGMENT_PATIENCE):
            return await _segment_records(client, segment)
    except TarryError as e:
        reason = e.message
    except RPCError as e:
        reason = f"Temporal refused to answer for it ({e.status.name}): {e.message}"
    except TimeoutError:
        reason = f"it did not answer within {SEGMENT_PATIENCE:g} s: its worker may be busy"
    return UnreadRun(run=segment.id, reason=f"{reason}; read its trail again later")


async def _segment_records(client: Client, segment: WorkflowExecution) -> list[AuditRecord]:
    """The records of one segment, each naming its run: from the event that closed it,
    else (open, or ended without a hand-over or a result) its `audit` query."""
    handle = client.get_workflow_handle(segment.id, run_id=segment.run_id, result_type=RunResult)
    records = None
    # Asked for an open run's close event, the server waits for it: ask the run instead.
    if segment.status not in (None, WorkflowExecutionStatus.RUNNING):
        async with translated_errors(segment.id):
            events = handle.fetch_history_events(
                event_filter_type=WorkflowHistoryEventFilterType.CLOSE_EVENT
            )
            records = await _closed_with(client, [event async for event in events])
    if records is None:
        records = await Delivery(client, handle).query(AUDIT_QUERY, list[AuditRecord])
    if segment.workflow_type != WORKFLOW_TYPE:  # an act on a schedule or an eval names it
        return records
    return [r.model_copy(update={"run": segment.id}) for r in records]


async def _closed_with(client: Client, events: Iterable[HistoryEvent]) -> list[AuditRecord] | None:
    """The records a segment's close event holds: its hand-over's or its result's; None
    when it holds none (it is open, or it ended otherwise)."""
    for event in events:
        if event.HasField("workflow_execution_continued_as_new_event_attributes"):
            payloads = event.workflow_execution_continued_as_new_event_attributes.input.payloads
        elif event.HasField("workflow_execution_completed_event_attributes"):
            payloads = event.workflow_execution_completed_event_attributes.result.payloads
        else:
            continue
        [value] = await client.data_converter.decode(payloads[:1], [dict[str, Any]])
        return _RECORDS.validate_python(value.get("audit", []))
    return None
