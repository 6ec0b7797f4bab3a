"""Waiting while a remote A2A agent's question waits for a person (`question` holds it):
the call's own wait takes the next reply as the answer (`workflows.remote_agents`).
Runs recorded before it never had a remote call, so it never holds for them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tarry.contracts import WaitingFor
from workflows.waits.wait import Wait

if TYPE_CHECKING:
    from workflows.memory import RunMemory


class Remote(Wait):
    kind = WaitingFor.REMOTE
    parks = False
    keeps_replies = True

    def holds(self, memory: RunMemory) -> bool:
        return memory.agents.asking() is not None


WAIT = Remote()
