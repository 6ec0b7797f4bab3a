"""Waiting for a decision on a text a guardrail asks about (`decide`, or the `approve`
signal, by the guardrail's approvers); the guardrail's own wait ends it
(`workflows.guardrail_asks`). Tried before `approval`: a tool result held while other
calls of its answer wait for theirs is what the person is asked about first."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tarry.contracts import WaitingFor
from workflows.waits.wait import Wait

if TYPE_CHECKING:
    from workflows.memory import RunMemory


class Guardrail(Wait):
    kind = WaitingFor.GUARDRAIL
    parks = False

    def holds(self, memory: RunMemory) -> bool:
        return any(p.guardrail is not None for p in memory.undecided())


WAIT = Guardrail()
