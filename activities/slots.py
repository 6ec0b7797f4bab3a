"""The run's side of its owner's slots (`workflows.run_slots`): a workflow cannot send
another workflow an update, so these activities do (`tarry.temporal.slots`)."""

from __future__ import annotations

from temporalio import activity

from tarry.contracts.slots import (
    ACQUIRE_ACTIVITY,
    RELEASE_ACTIVITY,
    SlotAnswer,
    SlotRelease,
    SlotRequest,
)
from tarry.temporal.slots import acquire_slot, release_slot

__all__ = ["acquire", "release"]


@activity.defn(name=ACQUIRE_ACTIVITY)
async def acquire(asked: SlotRequest) -> SlotAnswer:
    return await acquire_slot(activity.client(), asked, activity.info().task_queue)


@activity.defn(name=RELEASE_ACTIVITY)
async def release(released: SlotRelease) -> None:
    await release_slot(activity.client(), released)
