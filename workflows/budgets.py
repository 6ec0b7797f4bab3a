"""Budgets that pause: a run that has spent its tokens or its cost waits for a person.

At a turn boundary where the next model call would start over budget, the run waits
(`waiting_for: "budget"`, warning `BUDGET_EXCEEDED`) instead of failing: replies are
queued meanwhile and delivered once it goes on, and only `raise_budget` lifts it. The
update's handler records the new limits; the main loop alone pauses and goes on.
Pure functions of the run's memory: deterministic. A run without a budget never
pauses, so its commands are exactly those of a run from before budgets.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from tarry.contracts import TEMPORAL_UI, Budget, BudgetRaise, ErrorCode, Phase, Usage
from workflows import audit
from workflows.memory import RunMemory
from workflows.stage import RunScope, Stage


def exceeded(limits: Budget | None, spent: Usage) -> bool:
    """Whether `spent` has reached either limit."""
    if limits is None:
        return False
    tokens, cost = limits.max_total_tokens, limits.max_cost_usd
    return (tokens is not None and spent.total_tokens >= tokens) or (
        cost is not None and spent.cost_usd >= cost
    )


def holds(memory: RunMemory) -> bool:
    """At a turn boundary: whether the run must wait for its budget to be raised (it
    pauses, or stays paused) rather than ask the model. Going on clears the warning."""
    m = memory
    over = exceeded(m.budget.limits, m.conversation.usage)
    if over:
        m.warning = ErrorCode.BUDGET_EXCEEDED
    elif m.budget.paused and m.warning is ErrorCode.BUDGET_EXCEEDED:
        m.warning = None
    m.budget.paused = over
    return over


class BudgetHold(Stage):
    """The budgets' stage: a run over its budget stops at the turn boundary (`holds`)."""

    def holds(self, run: RunScope) -> bool:
        return holds(run.memory)


HOLD = BudgetHold()


def raise_problem(memory: RunMemory, raised: BudgetRaise) -> ApplicationError | None:
    """Why the run cannot take `raised` (`RUN_ENDED`, `BUDGET_INVALID`), or None."""
    m = memory
    if ended := m.ended_problem():
        return ended
    tokens, cost = raised.max_total_tokens, raised.max_cost_usd
    if tokens is None and cost is None:
        return _invalid("give max_total_tokens, max_cost_usd or both")
    if tokens is not None and tokens <= m.conversation.usage.total_tokens:
        return _invalid(
            f"the run has spent {m.conversation.usage.total_tokens} tokens; "
            f"max_total_tokens must be above that (got {tokens})"
        )
    if cost is not None and cost <= m.conversation.usage.cost_usd:
        return _invalid(
            f"the run has spent ${m.conversation.usage.cost_usd:.4f}; "
            f"max_cost_usd must be above that (got {cost:g})"
        )
    return None


def record(memory: RunMemory, raised: BudgetRaise) -> bool:
    """Replaces the limits `raised` names, and records who raised them; True when that
    lets a paused run go on."""
    m = memory
    current = m.budget.limits or Budget()
    m.budget.limits = current.model_copy(update=raised.limits())
    m.budget.raised_by = raised.by or TEMPORAL_UI
    audit.budget(m, raised)
    return (
        m.phase is Phase.WAITING_USER
        and m.budget.paused
        and not exceeded(m.budget.limits, m.conversation.usage)
    )


def _invalid(message: str) -> ApplicationError:
    return ApplicationError(message, type=ErrorCode.BUDGET_INVALID)


def install(run: RunScope) -> None:
    """Registers the `parent_budget` signal: the lead's budget was raised, so this
    sub-agent may spend what it has left."""

    def parent_budget(raised: BudgetRaise) -> None:
        if raise_problem(run.memory, raised) is None:
            record(run.memory, raised)

    workflow.set_signal_handler("parent_budget", parent_budget)
