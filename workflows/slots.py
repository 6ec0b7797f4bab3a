"""Concurrent-run caps: a run whose owner has `max_concurrent_runs` (`[limits]`) holds
one of their slots (`workflows.run_slots`) from its first model call to its end.

Before that call the run asks for a slot. Past the cap, under `queue`, it waits
(`waiting_for: slot`, its error `TOO_MANY_RUNS` saying how many runs are open) until the
slots tell it one is its (one of the owner's runs ended), asking again every
`ASK_AGAIN` meanwhile, which frees the slots of runs that closed without releasing
(terminated); a stop ends the wait. Under `refuse` (a run its door did not check: a
schedule's, a resumption) it fails at once with `TOO_MANY_RUNS`. Whatever ends the run
(it completes, fails, is stopped), it releases its slot or its place in line at its end.

A run without the cap (`WorkflowInput.slots` null: no `[limits]`, or none for its
owner) gives no command here, so its history is that of a run from before the cap.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

from tarry.contracts import ErrorCode, ErrorInfo, Phase
from tarry.contracts.slots import (
    ACQUIRE_ACTIVITY,
    RELEASE_ACTIVITY,
    SLOT_FREE_SIGNAL,
    SlotAnswer,
    SlotRelease,
    SlotRequest,
)
from workflows.memory import RunMemory, WorkflowInput
from workflows.memory_groups import SlotMark
from workflows.stage import AskModel, ModelOutcome, RunScope, Stage

SLOTS_CALL = timedelta(seconds=30)
SLOTS_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=2)
)
"""Slots not reachable are asked again for as long as it takes: the run waits."""
ASK_AGAIN = timedelta(minutes=5)
"""How often a queued run asks again unprompted: a holder terminated never releases."""


class SlotHold(Stage):
    """The slots' stage: a slot before the run's first model call."""

    async def around_model(self, run: RunScope, ask: AskModel) -> ModelOutcome:
        cap, m = run.input.slots, run.memory
        if cap is None or (m.slot is not None and m.slot.held):
            return await ask()
        mark = m.slot = m.slot or SlotMark()
        request = SlotRequest(cap=cap, run_id=workflow.info().workflow_id)
        while True:
            mark.free = False
            answer: SlotAnswer = await workflow.execute_activity(
                ACQUIRE_ACTIVITY,
                request,
                result_type=SlotAnswer,
                start_to_close_timeout=SLOTS_CALL,
                retry_policy=SLOTS_RETRY,
                summary="acquire a slot",
            )
            if answer.granted:
                _granted(run, mark)
                return await ask()
            if not cap.queue:
                return ErrorInfo(code=ErrorCode.TOO_MANY_RUNS, message=cap.refusal(answer.open))
            first = mark.queued is None
            mark.queued = ErrorInfo(
                code=ErrorCode.TOO_MANY_RUNS, message=cap.queued(answer.open, answer.position or 1)
            )
            m.warning, m.error = ErrorCode.TOO_MANY_RUNS, mark.queued
            if first:
                run.phases.wait()
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: mark.free or m.requests.stop, timeout=ASK_AGAIN
                )
            if m.requests.stop:
                _unqueued(m, mark)
                return None


def _granted(run: RunScope, mark: SlotMark) -> None:
    """The run holds a slot: a queued run's wait ends and it goes on with its call."""
    m = run.memory
    mark.held = True
    if mark.queued is not None:
        _unqueued(m, mark)
        if m.phase is Phase.WAITING_USER:
            run.phases.enter(Phase.RUNNING)


def _unqueued(m: RunMemory, mark: SlotMark) -> None:
    if m.error is mark.queued:
        m.error = None
    if m.warning is ErrorCode.TOO_MANY_RUNS:
        m.warning = None
    mark.queued = None


async def release(memory: RunMemory, input: WorkflowInput) -> None:
    """At the run's end: its slot, or its place in line, goes to the owner's next run."""
    if input.slots is None or memory.slot is None:
        return
    await workflow.execute_activity(
        RELEASE_ACTIVITY,
        SlotRelease(owner=input.slots.owner, run_id=workflow.info().workflow_id),
        start_to_close_timeout=SLOTS_CALL,
        retry_policy=SLOTS_RETRY,
        summary="release its slot",
    )
    memory.slot.held = False


SLOTS = SlotHold()


def install(run: RunScope) -> None:
    """Registers the slot-free signal: the owner's slots gave this queued run a slot, so
    it asks again, granted."""

    def slot_free() -> None:
        if run.memory.slot is not None:
            run.memory.slot.free = True

    workflow.set_signal_handler(SLOT_FREE_SIGNAL, slot_free)
