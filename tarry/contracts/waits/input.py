"""The run answered and waits for a reply: the wait of a chat."""

from tarry.contracts.audit import Act
from tarry.contracts.names import Need, NotifyEvent, WaitingFor
from tarry.contracts.waits.kind import Ending, WaitKind

__all__ = ["KIND"]

KIND = WaitKind(
    kind=WaitingFor.INPUT,
    label="reply",
    waits_for="a reply",
    hint="the run waits for your reply: `tarry send {run} TEXT`",
    quiet=True,
    ends=(Ending(message="send", who=Need.WRITE, act=Act.REPLY),),
    notify=NotifyEvent.WAITING_FOR_INPUT,
)
