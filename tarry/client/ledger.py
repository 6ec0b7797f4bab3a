"""A person's spend ledger of the day (`tarry.contracts.ledger`), from outside a run:
an admin's raise of the cap, and its totals (its start is `tarry.temporal.ledger`'s)."""

from __future__ import annotations

from temporalio.client import Client

from tarry.contracts import ErrorCode
from tarry.contracts.ledger import (
    RAISE_UPDATE,
    CapRaise,
    LedgerState,
)
from tarry.core.errors import TarryError
from tarry.core.identities import Caller
from tarry.core.ownership import Policy
from tarry.temporal.ledger import ledger_start

__all__ = ["raise_cap", "raise_problem"]


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
