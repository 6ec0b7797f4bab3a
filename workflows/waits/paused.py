"""Waiting after a person paused the run (`pause`, `paused_by` names them): a reply lets
it go on. Before this kind, a paused run waited for `input` like any other."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tarry.contracts import WaitingFor
from tarry.contracts.compatibility import PAUSED_WAIT
from workflows.waits.wait import Wait

if TYPE_CHECKING:
    from workflows.memory import RunMemory


class Paused(Wait):
    kind = WaitingFor.PAUSED
    patch = PAUSED_WAIT

    def holds(self, memory: RunMemory) -> bool:
        return memory.requests.paused_by is not None


WAIT = Paused()
