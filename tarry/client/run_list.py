"""Finding runs: what Temporal's visibility records of each (its search attributes and
memo), listed by phase and what it waits for, a page at a time.

`tarry list`, `tarry status` (with no worker to answer) and the HTTP API's run list
read the same rows, so a run looks the same from a shell and from a browser.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel
from temporalio.api.workflowservice.v1 import ListWorkflowExecutionsRequest
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from tarry.client.schedules import SCHEDULED_BY_ATTRIBUTE, schedule_name_problem
from tarry.contracts import (
    EVAL_WORKFLOW,
    MODEL_ATTRIBUTE,
    PHASE_ATTRIBUTE,
    SUMMARY_MEMO,
    TURNS_ATTRIBUTE,
    WAITING_FOR_ATTRIBUTE,
    WORKFLOW_TYPE,
    ErrorCode,
    Phase,
    RunState,
    WaitingFor,
    run_id_problem,
)
from tarry.core.errors import TarryError

__all__ = ["RunPage", "RunRow", "find_children", "find_runs", "runs_query"]

LATEST_SEGMENT = "ExecutionStatus != 'ContinuedAsNew'"
"""Visibility's condition for a run's latest execution only: a run that continued as new
keeps a closed execution per segment under its id, each with the search attributes it
had when it handed over."""

CHILDREN_PAGE = 200
"""How many of a run's children visibility answers at a time (`find_children`)."""


_CUT_SHORT = {
    WorkflowExecutionStatus.TERMINATED: "Terminated",
    WorkflowExecutionStatus.CANCELED: "Canceled",
    WorkflowExecutionStatus.TIMED_OUT: "TimedOut",
}
"""Ends the run did not write its phase for (a stop that terminated a run whose task kept
failing, an operator's terminate), with visibility's names for them: its `TarryPhase` is
the last it wrote, so it shows, and is found, as `Failed`."""


class RunRow(BaseModel):
    """One run as visibility records it; the search attributes are None on runs without them."""

    run_id: str
    phase: str | None
    turns: int | None
    model: str | None
    """The model profile the run names, as the `TarryModel` search attribute holds it."""
    waiting_for: str | None = None
    started: datetime
    """When the run's latest segment started (a continue-as-new starts a new one)."""
    updated_at: datetime
    """When the run ended, else when its latest segment started: visibility records no
    later moment of a run in flight."""
    summary: str | None = None
    """The first line of the prompt (of the first message, for a run started without
    one); None for runs started without the client."""
    schedule: str | None = None
    """The schedule that started the run (`TemporalScheduledById`); None for one a
    person or a program started."""
    parent: str | None = None
    """The run that delegated to this one, a sub-agent's (Temporal's `ParentWorkflowId`);
    None for a run of its own."""
    kind: Literal["run", "eval"] = "run"
    """`eval`: an eval (`tarry eval`), listed beside the runs; its id opens its report."""

    @classmethod
    async def of(cls, execution: WorkflowExecution) -> RunRow:
        attributes = execution.typed_search_attributes
        return cls(
            run_id=execution.id,
            phase=Phase.FAILED
            if execution.status in _CUT_SHORT
            else attributes.get(PHASE_ATTRIBUTE),
            turns=attributes.get(TURNS_ATTRIBUTE),
            model=attributes.get(MODEL_ATTRIBUTE),
            waiting_for=attributes.get(WAITING_FOR_ATTRIBUTE),
            started=execution.start_time,
            updated_at=execution.close_time or execution.start_time,
            summary=await _summary(execution),
            schedule=attributes.get(SCHEDULED_BY_ATTRIBUTE),
            parent=execution.parent_id,
            kind="eval" if execution.workflow_type == EVAL_WORKFLOW else "run",
        )


async def _summary(execution: WorkflowExecution) -> str | None:
    """The run's summary memo; None where this client cannot read it (a run encrypted
    with a key it does not hold, sharing the namespace): one such run must not keep the
    others from being listed."""
    try:
        summary: str | None = await execution.memo_value(SUMMARY_MEMO, None, type_hint=str)
    except (KeyError, ValueError):  # an encoding it lacks; a wrong key (EncryptionKeyError)
        return None
    return summary


class RunPage(BaseModel):
    rows: list[RunRow]
    next_page_token: bytes | None
    """The SDK's token for the page after this one; None after the last."""


def runs_query(
    phase: Phase | None = None,
    waiting_for: WaitingFor | frozenset[WaitingFor] | None = None,
    task_queue: str | None = None,
    schedule: str | None = None,
    readable: str | None = None,
) -> str:
    """The visibility query for Tarry's runs (and evals), in `phase`, waiting for `waiting_for`
    (one kind, or any of a set), on
    `task_queue`, started by `schedule` (None: any), those `readable` (a condition of
    `Policy.readable_clause`) only. The first two are enum members and the queue is the
    caller's own setting; a schedule name is checked against the name rule here, which
    has no quote, so nothing a person types can change the query."""
    query = f"WorkflowType IN ('{WORKFLOW_TYPE}', '{EVAL_WORKFLOW}')"
    if task_queue is not None:
        query += f" AND TaskQueue = '{task_queue}'"
    if phase is not None:
        query += f" AND {_phase_clause(phase)}"
    if isinstance(waiting_for, WaitingFor):
        query += f" AND {WAITING_FOR_ATTRIBUTE.name} = '{waiting_for.value}'"
    elif waiting_for is not None:
        kinds = ", ".join(f"'{kind.value}'" for kind in sorted(waiting_for))
        query += f" AND {WAITING_FOR_ATTRIBUTE.name} IN ({kinds})"
    if waiting_for is not None:
        query += " AND ExecutionStatus = 'Running'"  # a run cut short waits for no one
    if schedule is not None:
        if problem := schedule_name_problem(schedule):
            raise TarryError(ErrorCode.SCHEDULE_INVALID, problem)
        query += f" AND {SCHEDULED_BY_ATTRIBUTE.name} = '{schedule}'"
    if readable is not None:
        query += f" AND {readable}"
    return query


def _phase_clause(phase: Phase) -> str:
    """The condition for runs in `phase` as lists show it: a run cut short (`_CUT_SHORT`)
    is `Failed`, whatever phase it last wrote."""
    written = f"{PHASE_ATTRIBUTE.name} = '{phase.value}'"
    if phase is Phase.FAILED:
        cut_short = " OR ".join(f"ExecutionStatus = '{s}'" for s in _CUT_SHORT.values())
        return f"({written} OR {cut_short})"
    return " AND ".join([written, *(f"ExecutionStatus != '{s}'" for s in _CUT_SHORT.values())])


async def _check_page_token(client: Client, query: str, page_token: bytes) -> None:
    """Asks visibility once, without the SDK's retries, whether it can read `page_token`:
    it answers a forged one with an error the SDK takes for a passing one (`UNKNOWN`),
    and retries for ten seconds before it gives up."""
    try:
        await client.workflow_service.list_workflow_executions(
            ListWorkflowExecutionsRequest(
                namespace=client.namespace, query=query, page_size=1, next_page_token=page_token
            ),
            retry=False,
        )
    except RPCError as e:
        if e.status not in (RPCStatusCode.UNKNOWN, RPCStatusCode.INVALID_ARGUMENT):
            raise
        raise TarryError(
            ErrorCode.INPUT_INVALID, "not a page token of this list: start from the first page"
        ) from None


async def find_runs(
    client: Client,
    *,
    phase: Phase | None = None,
    waiting_for: WaitingFor | frozenset[WaitingFor] | None = None,
    task_queue: str | None = None,
    schedule: str | None = None,
    limit: int = 20,
    page_token: bytes | None = None,
    readable: str | None = None,
) -> RunPage:
    """One page of up to `limit` runs, each once (`LATEST_SEGMENT`), open runs first,
    newest first (visibility's own order), from `page_token` (a `RunPage.next_page_token`)
    or the start; `INPUT_INVALID` for a token visibility did not give. `schedule`: only
    the runs that schedule started; `readable`: only those a caller may read
    (`Policy.readable_clause`)."""
    query = f"{runs_query(phase, waiting_for, task_queue, schedule, readable)} AND {LATEST_SEGMENT}"
    if page_token is not None:
        await _check_page_token(client, query, page_token)
    executions = client.list_workflows(query, page_size=limit, next_page_token=page_token)
    await executions.fetch_next_page()
    rows = [await RunRow.of(e) for e in executions.current_page or []]
    return RunPage(rows=rows, next_page_token=executions.next_page_token)


def child_waited_on(state: RunState) -> str | None:
    """The sub-agent run `state` says the run waits on: `waiting_on` while it waits for a
    local agent, not a remote agent's call (no run: `waiting_for: "remote"`)."""
    return state.waiting_on if state.waiting_for is WaitingFor.AGENT else None


async def find_children(client: Client, run_id: str, waiting_on: str | None = None) -> list[str]:
    """The ids of the sub-agent runs `run_id` started, open or ended, oldest first, as
    Temporal records them (`ParentWorkflowId`, which a continue-as-new keeps). Visibility
    lists a child a moment after it starts: `waiting_on`, the child the run's state says
    it waits on, is added at the end while visibility has not caught up with it."""
    if problem := run_id_problem(run_id):  # the rule has no quote: the query stays ours
        raise TarryError(ErrorCode.RUN_ID_INVALID, problem)
    query = f"{runs_query()} AND ParentWorkflowId = '{run_id}'"
    started: dict[str, datetime] = {}
    # A child that continued as new has an execution per segment: one id, its first start.
    async for execution in client.list_workflows(query, page_size=CHILDREN_PAGE):
        first = started.get(execution.id, execution.start_time)
        started[execution.id] = min(first, execution.start_time)
    children = sorted(started, key=started.__getitem__)
    if waiting_on is not None and waiting_on not in children:
        children.append(waiting_on)
    return children
