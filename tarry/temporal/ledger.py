"""The start of a person's spend ledger of the day (`tarry.contracts.ledger`), shared by
the worker's ledger activities (`activities.ledger`) and the client (`tarry.client.ledger`):
on this floor, so a worker loads none of the client."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from temporalio.client import WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy

from tarry.contracts.ledger import LEDGER_WORKFLOW, LedgerState, day_of, ledger_id

__all__ = ["LEDGER_SUMMARY", "ledger_start"]

LEDGER_SUMMARY = "Tarry's spend ledger of {owner} on {day}, not a run"


def ledger_start(
    owner: str, time_zone: str, task_queue: str, now: datetime | None = None
) -> WithStartWorkflowOperation[Any, LedgerState]:
    """The start of `owner`'s ledger of the day `now` falls on in `time_zone`, or the
    ledger itself when it runs already (update-with-start: whoever comes first starts it,
    and nobody's update is lost to the race)."""
    day, ends = day_of(time_zone, now or datetime.now(UTC))
    return WithStartWorkflowOperation(
        LEDGER_WORKFLOW,
        LedgerState(owner=owner, day=day, day_ends=ends),
        id=ledger_id(owner, day),
        task_queue=task_queue,
        result_type=LedgerState,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        static_summary=LEDGER_SUMMARY.format(owner=owner, day=day),
    )
