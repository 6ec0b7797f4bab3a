"""A sub-agent this run delegated to waits for a person (`RunState.waiting_on` names
it): answering that run lets this one go on. No `[[notify]]` event of its own: the
sub-agent's stop point is told of, as the wait it is."""

from tarry.contracts.names import WaitingFor
from tarry.contracts.waits.kind import WaitKind

__all__ = ["KIND"]

KIND = WaitKind(
    kind=WaitingFor.AGENT,
    label="agent",
    waits_for="its sub-agent",
    hint="its sub-agent {waiting_on} waits for a person: answer that run",
    ends=(),
    delegated=True,
    notify=None,
)
