"""A remote A2A agent this run delegated to asks a question (`input-required`): the
person answers it with a reply to this run, which goes to that agent as its next message
(`workflows.remote_agents`)."""

from tarry.contracts.audit import Act
from tarry.contracts.names import Need, NotifyEvent, WaitingFor
from tarry.contracts.waits.kind import Ending, WaitKind

__all__ = ["KIND"]

KIND = WaitKind(
    kind=WaitingFor.REMOTE,
    label="remote",
    waits_for="an answer to its remote agent",
    hint="its remote agent {waiting_on} asks a question: `tarry send {run} TEXT` answers it",
    ends=(Ending(message="send", who=Need.WRITE, act=Act.REPLY),),
    notify=NotifyEvent.WAITING_FOR_INPUT,
)
