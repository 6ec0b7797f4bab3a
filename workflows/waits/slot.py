"""Waiting for a slot among the owner's runs (`workflows.slots`): the run waits inside
its first model call's stage, not parked at a turn boundary, and a reply is queued."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tarry.contracts import WaitingFor
from workflows.waits.wait import Wait

if TYPE_CHECKING:
    from workflows.memory import RunMemory


class Slot(Wait):
    kind = WaitingFor.SLOT
    parks = False
    keeps_replies = True

    def holds(self, memory: RunMemory) -> bool:
        return memory.slot is not None and memory.slot.queued is not None


WAIT = Slot()
