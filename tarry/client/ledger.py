"""A person's spend ledger of the day (`tarry.contracts.ledger`), from outside a run:
the start that finds or begins it, an admin's raise of the cap, and its totals."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy

from tarry.contracts import ErrorCode
from tarry.contracts.ledger import (
    LEDGER_WORKFLOW,
    RAISE_UPDATE,
    CapRaise,
    LedgerState,
    day_of,
    ledger_id,
)
from tarry.core.errors import TarryError
from tarry.core.identities import Caller
from tarry.core.ownership import Policy

__all__ = ["ledger_start", "raise_cap", "raise_problem"]

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


def raise_problem(caller: Caller, policy: Policy, raised: CapRaise) -> TarryError | None:
    """Why `caller` may not make `raised`: only an admin raises a cap
    (`NOT_ALLOWED`), and a raise names a cap (`INPUT_INVALID`)."""
    if not policy.is_admin(caller):
        return TarryError(
            ErrorCode.NOT_ALLOWED,
            f"{caller.user} is no admin: only an admin ([api] admins) raises a daily cap",
        )
    if raised.max_cost_usd is None and raised.max_tokens is None:
        return TarryError(
            ErrorCode.INPUT_INVALID, "give the new cap: --cost USD, --tokens N or both"
        )
    return None


async def raise_cap(
    client: Client, task_queue: str, owner: str, time_zone: str, raised: CapRaise
) -> LedgerState:
    """Raises `owner`'s daily caps for the rest of today (in `time_zone`): their runs
    waiting at the cap ask again. The ledger's state after it."""
    state: LedgerState = await client.execute_update_with_start_workflow(
        RAISE_UPDATE,
        raised,
        start_workflow_operation=ledger_start(owner, time_zone, task_queue),
        result_type=LedgerState,
    )
    return state
