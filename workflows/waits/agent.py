"""Waiting while a sub-agent waits for a person (`waiting_on` names it): answering that
run ends it. Replies to this run stay queued meanwhile (`workflows.agents`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tarry.contracts import WaitingFor
from workflows.waits.wait import Wait

if TYPE_CHECKING:
    from workflows.memory import RunMemory


class Agent(Wait):
    kind = WaitingFor.AGENT
    parks = False
    keeps_replies = True

    def holds(self, memory: RunMemory) -> bool:
        return bool(memory.agents.waiting)


WAIT = Agent()
