"""Finding runs by what Temporal's visibility records of them (search attributes and the
summary memo): `tarry list` and the `waiting_runs` tool of `tarry mcp`."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel
from temporalio.client import WorkflowExecution

from tarry.client import SUMMARY_MEMO, Tarry
from tarry.contracts import (
    MODEL_ATTRIBUTE,
    PHASE_ATTRIBUTE,
    TURNS_ATTRIBUTE,
    WAITING_FOR_ATTRIBUTE,
    WORKFLOW_TYPE,
    Phase,
    WaitingFor,
)

__all__ = ["RunRow", "find_runs"]


class RunRow(BaseModel):
    """One line of `tarry list`; the search attributes are None on runs without them."""

    run_id: str
    phase: str | None
    turns: int | None
    model: str | None
    """The model profile the run names, as the `TarryModel` search attribute holds it."""
    waiting_for: str | None = None
    started: datetime
    summary: str | None = None
    """The first line of the prompt; None for runs started without the client."""

    @classmethod
    async def of(cls, execution: WorkflowExecution) -> RunRow:
        attributes = execution.typed_search_attributes
        return cls(
            run_id=execution.id,
            phase=attributes.get(PHASE_ATTRIBUTE),
            turns=attributes.get(TURNS_ATTRIBUTE),
            model=attributes.get(MODEL_ATTRIBUTE),
            waiting_for=attributes.get(WAITING_FOR_ATTRIBUTE),
            started=execution.start_time,
            summary=await execution.memo_value(SUMMARY_MEMO, None, type_hint=str),
        )


async def find_runs(
    tarry: Tarry,
    phase: Phase | None,
    waiting_for: WaitingFor | None,
    limit: int,
    *,
    own_queue: bool = False,
) -> list[RunRow]:
    """Runs in `phase`, waiting for `waiting_for` (None: any), open ones first, newest
    first; with `own_queue`, only those on `tarry`'s task queue."""
    query = f"WorkflowType = '{WORKFLOW_TYPE}'"
    if own_queue:
        query += f" AND TaskQueue = '{tarry.task_queue}'"
    if phase is not None:
        query += f" AND {PHASE_ATTRIBUTE.name} = '{phase}'"
    if waiting_for is not None:
        query += f" AND {WAITING_FOR_ATTRIBUTE.name} = '{waiting_for}'"
    return [await RunRow.of(e) async for e in tarry.client.list_workflows(query, limit=limit)]
