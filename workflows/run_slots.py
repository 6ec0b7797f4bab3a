"""`RunSlots`: which of one person's runs hold a slot under their `max_concurrent_runs`,
and which wait for one, exactly once.

Entity style, as `SpendLedger`: the updates record (an ask granted, queued or refused; a
release) and answer at once, never awaiting, so no two interleave; the main loop alone
gives commands: it tells the queued runs that got a slot (`SLOT_FREE_SIGNAL`), hands
over (continue-as-new) once history grows, and ends once nothing is held or queued for
an hour (the next ask starts it again: update-with-start).

Exactly once: a slot is keyed by its run's id. An ask by a run that holds one is
granted again (a retried activity, a replay, the run asking after its door did); a run
queued keeps its place; a release of a run holding nothing frees nothing.

A run that ends releases its slot, however it ends (completed, failed, stopped). One
that cannot (terminated, or a door that acquired and crashed before starting it) is
found by the next ask that meets a full cap: its activity checks the holders' status
(`tarry.temporal.slots`) and names the closed ones, which are freed first. A queued run
asks again now and then for that reason (`workflows.slots`).
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from tarry.contracts.slots import (
        ACQUIRE_UPDATE,
        RELEASE_UPDATE,
        SLOT_FREE_SIGNAL,
        SLOTS_WORKFLOW,
        SlotAnswer,
        SlotRelease,
        SlotRequest,
        SlotsState,
    )

HAND_OVER_AFTER = 2_000
"""History events after which the slots continue as new (or sooner, when suggested)."""
IDLE = timedelta(hours=1)
"""How long the slots stay open with nothing held or queued."""


@workflow.defn(name=SLOTS_WORKFLOW)
class RunSlots:
    @workflow.init
    def __init__(self, state: SlotsState) -> None:
        self._s = state
        self._to_tell: list[str] = []

    @workflow.run
    async def run(self, state: SlotsState) -> SlotsState:
        s = self._s
        while True:
            idle = False
            try:
                await workflow.wait_condition(
                    lambda: bool(self._to_tell) or self._hand_over_due(),
                    timeout=IDLE if self._empty() else None,
                )
            except TimeoutError:
                idle = True
            if self._to_tell:
                told, self._to_tell = self._to_tell, []
                await asyncio.gather(*(_tell(run_id) for run_id in told))
            if idle and self._empty():
                await workflow.wait_condition(workflow.all_handlers_finished)
                if self._empty() and not self._to_tell:
                    return s
            if self._hand_over_due():
                await workflow.wait_condition(workflow.all_handlers_finished)
                if not self._to_tell:  # else told first, on the next round
                    workflow.continue_as_new(s)

    @workflow.update(name=ACQUIRE_UPDATE)
    def acquire(self, asked: SlotRequest) -> SlotAnswer:
        """Grants a slot while fewer than the cap hold one and nobody queued before
        `asked`; else queues it (`RunCap.queue`) or refuses it, recording nothing."""
        s = self._s
        s.max_runs = asked.cap.max_runs
        for run_id in asked.gone:
            self._free(run_id)
        self._promote()  # a cap raised in the config lets those in line go first
        run_id = asked.run_id
        if run_id in s.holders:
            return self._answer(granted=True, held_before=True)
        ahead = s.queue.index(run_id) if run_id in s.queue else len(s.queue)
        if len(s.holders) + ahead >= s.max_runs:
            if not asked.cap.queue:
                return self._answer(granted=False)
            if run_id not in s.queue:
                s.queue.append(run_id)
            return self._answer(granted=False, position=s.queue.index(run_id) + 1)
        with contextlib.suppress(ValueError):
            s.queue.remove(run_id)
        s.holders[run_id] = workflow.now()
        return self._answer(granted=True)

    @workflow.update(name=RELEASE_UPDATE)
    def release(self, released: SlotRelease) -> SlotsState:
        """Frees the run's slot, or its place in line; the first queued get the room."""
        self._free(released.run_id)
        return self._s

    @workflow.query
    def state(self) -> SlotsState:
        return self._s

    def _free(self, run_id: str) -> None:
        s = self._s
        s.holders.pop(run_id, None)
        with contextlib.suppress(ValueError):
            s.queue.remove(run_id)
        self._promote()

    def _promote(self) -> None:
        """Gives the first in line the slots there is room for, and has them told."""
        s = self._s
        while s.queue and len(s.holders) < s.max_runs:
            first = s.queue.pop(0)
            s.holders[first] = workflow.now()
            self._to_tell.append(first)

    def _answer(
        self, *, granted: bool, position: int | None = None, held_before: bool = False
    ) -> SlotAnswer:
        s = self._s
        return SlotAnswer(
            granted=granted,
            held_before=held_before,
            open=len(s.holders),
            position=position,
            holders=dict(s.holders),
        )

    def _empty(self) -> bool:
        return not self._s.holders and not self._s.queue

    def _hand_over_due(self) -> bool:
        info = workflow.info()
        return info.is_continue_as_new_suggested() or info.get_current_history_length() > (
            HAND_OVER_AFTER
        )


async def _tell(run_id: str) -> None:
    """Signals run `run_id` that a slot is its; a run gone meanwhile holds it until the
    next ask that meets a full cap finds it closed."""
    try:
        await workflow.get_external_workflow_handle(run_id).signal(SLOT_FREE_SIGNAL)
    except Exception as e:  # the run is gone
        workflow.logger.info("run %s not told of its slot: %s", run_id, e)
