"""The contracts of concurrent-run caps (`[limits] max_concurrent_runs`): the cap a run
carries, and the messages between a run, its activities, the door that starts it and its
owner's slots (`workflows.run_slots`, `activities.slots`, `tarry.temporal.slots`).

One `RunSlots` workflow per owner (`slots_id`) holds which of their runs hold a slot and
which wait for one, in order: a run acquires a slot before its first model call and
releases it when it ends, however it ends.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

__all__ = [
    "ACQUIRE_ACTIVITY",
    "ACQUIRE_UPDATE",
    "RELEASE_ACTIVITY",
    "RELEASE_UPDATE",
    "SLOTS_ID_PREFIX",
    "SLOTS_WORKFLOW",
    "SLOT_FREE_SIGNAL",
    "RunCap",
    "SlotAnswer",
    "SlotRelease",
    "SlotRequest",
    "SlotsState",
    "slots_id",
]

SLOTS_WORKFLOW = "RunSlots"
ACQUIRE_UPDATE = "acquire"
RELEASE_UPDATE = "release"
ACQUIRE_ACTIVITY = "acquire_slot"
RELEASE_ACTIVITY = "release_slot"
SLOT_FREE_SIGNAL = "slot_free"
"""The owner's slots tell a queued run that a slot is its now: it asks again, granted."""
SLOTS_ID_PREFIX = "tarry-slots-"


def slots_id(owner: str) -> str:
    """The workflow id of `owner`'s slots (`tarry-slots-alice`)."""
    return f"{SLOTS_ID_PREFIX}{owner}"


class RunCap(BaseModel):
    """What a run carries of its owner's `max_concurrent_runs`: set by the door that
    starts it from its caller's limits, in its input (the workflow reads no config), by
    its hand-overs and resumptions; a sub-agent carries none (it is part of its parent's
    run, and would otherwise wait for a slot its parent holds)."""

    owner: str
    max_runs: int = Field(ge=1)
    queue: bool = True
    """`at_max_concurrent_runs = "queue"`: past the cap the run waits for a slot; False
    (`refuse`): it is refused, `TOO_MANY_RUNS`."""

    def refusal(self, open: int) -> str:
        """What a start past the cap is told: whose cap, and how many runs are open."""
        return (
            f"{self.owner} has {open} runs open, at their max_concurrent_runs of"
            f" {self.max_runs}; start it again once one of them ends (`tarry stop RUN`"
            " ends one), or ask an admin to raise the [limits] entry"
        )

    def queued(self, open: int, position: int) -> str:
        return (
            f"queued: {self.owner} has {open} runs open, at their max_concurrent_runs of"
            f" {self.max_runs}; this run is number {position} in line and starts when one"
            " of them ends"
        )


class SlotRequest(BaseModel):
    """A run's ask for a slot (by its door before it starts, or by the run itself)."""

    cap: RunCap
    run_id: str
    gone: list[str] = []
    """Holders found closed (terminated, or never started): freed before the ask."""


class SlotAnswer(BaseModel):
    granted: bool
    held_before: bool = False
    """The run held its slot already (an ask repeated): its door frees nothing it
    did not take."""
    open: int
    """The owner's runs holding a slot, with this one when granted."""
    position: int | None = None
    """Where a queued run stands in line, from 1; None when granted or refused."""
    holders: dict[str, datetime] = {}
    """The runs holding a slot and since when, for the asker's check of closed ones."""


class SlotRelease(BaseModel):
    owner: str
    run_id: str


class SlotsState(BaseModel):
    """The owner's slots: the query's answer, and what a hand-over carries."""

    owner: str
    max_runs: int = 1
    """The cap as the latest ask carried it (a config change takes effect there)."""
    holders: dict[str, datetime] = {}
    """The runs holding a slot, by id, and when they got it."""
    queue: list[str] = []
    """The runs waiting for a slot, first come first."""
