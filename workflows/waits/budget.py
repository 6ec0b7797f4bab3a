"""Waiting for a raised budget (`raise_budget`): a run that spent its tokens or cost
stops at a turn boundary (`workflows.budgets`), and a reply alone does not move it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tarry.contracts import WaitingFor
from workflows import budgets
from workflows.waits.wait import Wait

if TYPE_CHECKING:
    from workflows.memory import RunMemory


class Budget(Wait):
    kind = WaitingFor.BUDGET
    keeps_replies = True

    def holds(self, memory: RunMemory) -> bool:
        capped = memory.spend is not None and memory.spend.capped is not None
        return memory.budget.paused or capped

    def ends(self, memory: RunMemory) -> bool:
        return not budgets.exceeded(memory.budget.limits, memory.conversation.usage)


WAIT = Budget()
