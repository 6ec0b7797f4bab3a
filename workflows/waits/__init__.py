"""What a run waits for, one kind per module, each registered once (`WAITS`).

A run at a stop point (`WaitingUser`) waits for one thing, named by `waiting_for` in its
state, its search attribute and every door. Each kind says when the run waits for it
(`holds`) and, for a run parked at a turn boundary, what lets it go on (`ends`); how the
doors show it is its entry in `tarry.contracts.waits`, named alike.

Kinds are tried in `WAITS`' order, and the first that holds is the run's: a run with a
call undecided waits for the approval whatever else it also waits for.

Hazard: `waiting_for` is in the commands a run gives (its search attribute, a sub-agent's
report to its parent), so a kind added after runs exist changes the commands of runs in
flight. A kind with a `patch` counts in those commands (`recorded`) only where the patch
was taken; elsewhere the run records the next kind that holds, as code before it did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from temporalio import workflow

from tarry.contracts import Phase, WaitingFor
from workflows.waits import (
    agent,
    approval,
    auth,
    budget,
    guardrail,
    input,
    model,
    paused,
    remote,
    slot,
)
from workflows.waits.wait import Wait

if TYPE_CHECKING:
    from workflows.memory import RunMemory

WAITS: tuple[Wait, ...] = (
    guardrail.WAIT,
    approval.WAIT,
    auth.WAIT,
    agent.WAIT,
    remote.WAIT,
    model.WAIT,
    slot.WAIT,
    budget.WAIT,
    paused.WAIT,
    input.WAIT,
)
"""Every kind, in the order they are tried; `input` (a reply) holds for any run that waits."""


def waiting_for(memory: RunMemory) -> WaitingFor | None:
    """What the run waits for now; None while it runs or once it has ended."""
    wait = _current(memory, recorded=False)
    return None if wait is None else wait.kind


def recorded(memory: RunMemory) -> WaitingFor | None:
    """`waiting_for` as the run's commands record it (a kind newer than the run's
    history counts only once its patch is taken). Only in the main loop: a query may not
    take a patch."""
    wait = _current(memory, recorded=True)
    return None if wait is None else wait.kind


def goes_on(memory: RunMemory) -> bool:
    """Whether a run parked at a turn boundary may go on: what it waits for has ended."""
    wait = _current(memory, recorded=False, parked=True)
    return wait is not None and wait.ends(memory)


def keeps_replies(memory: RunMemory) -> bool:
    """Whether a reply that comes now stays queued without moving the run: a `send`
    caller then gets its answer at once, as at a stop point."""
    wait = _current(memory, recorded=False)
    return wait is not None and wait.keeps_replies


def _current(memory: RunMemory, *, recorded: bool, parked: bool = False) -> Wait | None:
    if memory.phase is not Phase.WAITING_USER:
        return None
    for wait in WAITS:
        if parked and not wait.parks:
            continue
        if not wait.holds(memory):
            continue
        if recorded and wait.patch is not None and not workflow.patched(wait.patch.id):
            continue
        return wait
    return None
