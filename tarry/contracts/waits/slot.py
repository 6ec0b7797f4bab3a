"""Queued for a slot: the run's owner has `max_concurrent_runs` runs open (`[limits]`,
`at_max_concurrent_runs = "queue"`), and it makes its first model call once one of them
ends (`workflows.slots`). Nothing a person sends to this run ends the wait: ending, or
answering, one of the owner's other runs does. A reply is queued meanwhile. No
`[[notify]]` event: the owner started it, and `tarry list` shows it."""

from tarry.contracts.names import WaitingFor
from tarry.contracts.waits.kind import WaitKind

__all__ = ["KIND"]

KIND = WaitKind(
    kind=WaitingFor.SLOT,
    label="slot",
    waits_for="a slot among its owner's runs",
    hint="queued ({error}); it starts when one of the owner's runs ends: `tarry stop RUN`"
    " on one of them frees its slot",
    ends=(),
    notify=None,
)
