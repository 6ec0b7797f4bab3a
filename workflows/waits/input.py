"""Waiting for a reply: what any run at a stop point waits for when nothing else holds
it. `send`, `reply` or the `user_input` signal, by the run's writers, end it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tarry.contracts import WaitingFor
from workflows.waits.wait import Wait

if TYPE_CHECKING:
    from workflows.memory import RunMemory


class Input(Wait):
    kind = WaitingFor.INPUT

    def holds(self, memory: RunMemory) -> bool:
        return True


WAIT = Input()
