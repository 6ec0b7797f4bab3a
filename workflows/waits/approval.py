"""Waiting for a decision on gated tool calls (`decide`, or the `approve` signal, by the
calls' approvers); the call's own wait ends it (`workflows.approval_gate`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tarry.contracts import WaitingFor
from workflows.waits.wait import Wait

if TYPE_CHECKING:
    from workflows.memory import RunMemory


class Approval(Wait):
    kind = WaitingFor.APPROVAL
    parks = False

    def holds(self, memory: RunMemory) -> bool:
        return bool(memory.undecided())


WAIT = Approval()
