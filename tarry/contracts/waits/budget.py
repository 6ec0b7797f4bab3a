"""The run spent its budget (`RunState.budget`) and waits until someone raises it."""

from tarry.contracts.audit import Act
from tarry.contracts.names import Need, NotifyEvent, WaitingFor
from tarry.contracts.waits.kind import Ending, WaitKind

__all__ = ["KIND"]

KIND = WaitKind(
    kind=WaitingFor.BUDGET,
    label="budget",
    waits_for="a raised budget",
    hint="the run spent its budget; `tarry budget {run} --tokens N --cost USD` raises it",
    ends=(Ending(message="raise_budget", who=Need.WRITE, act=Act.BUDGET),),
    notify=NotifyEvent.WAITING_FOR_BUDGET,
)
