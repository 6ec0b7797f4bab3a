"""Gated tool calls wait for a decision (`RunState.pending_approvals` lists them)."""

from tarry.contracts.audit import Act
from tarry.contracts.names import Need, NotifyEvent, WaitingFor
from tarry.contracts.waits.kind import Ending, WaitKind

__all__ = ["KIND"]

KIND = WaitKind(
    kind=WaitingFor.APPROVAL,
    label="approval",
    waits_for="a decision on tool calls",
    hint="the run waits for a decision: `tarry approve {run} CALL_ID` (`--reject` refuses)",
    ends=(
        Ending(message="decide", who=Need.DECIDE, act=Act.DECISION),
        Ending(message="approve", signal=True, who=Need.DECIDE, act=Act.DECISION),
    ),
    notify=NotifyEvent.WAITING_FOR_APPROVAL,
)
