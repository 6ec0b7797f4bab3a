"""A person paused the run (`RunState.paused_by` names them): a reply lets it go on.
Told of as `waiting_for_input`, the event a receiver knows a run waiting for a reply by,
as it was before pausing had a kind of its own."""

from tarry.contracts.audit import Act
from tarry.contracts.names import Need, NotifyEvent, WaitingFor
from tarry.contracts.waits.kind import Ending, WaitKind

__all__ = ["KIND"]

KIND = WaitKind(
    kind=WaitingFor.PAUSED,
    label="paused",
    waits_for="a reply after a pause",
    hint="{paused_by} paused the run; a reply lets it go on: `tarry send {run} TEXT`",
    # Said by the pause itself (`tarry send`'s Ctrl-C, the chat's /pause), as a wait
    # for a reply was before pausing had a kind of its own; `tarry status` shows who.
    quiet=True,
    ends=(Ending(message="send", who=Need.WRITE, act=Act.REPLY),),
    notify=NotifyEvent.WAITING_FOR_INPUT,
)
