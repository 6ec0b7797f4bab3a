"""What a kind of wait is (`workflows.waits` registers them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from tarry.contracts import WaitingFor
from tarry.contracts.compatibility import Patch

if TYPE_CHECKING:
    from workflows.memory import RunMemory


class Wait:
    """One kind of wait: when a run at a stop point waits for it, and what ends it."""

    kind: ClassVar[WaitingFor]
    parks: ClassVar[bool] = True
    """Whether the run waits for it parked at a turn boundary, its main loop waiting for
    `ends`; False for a wait inside a tool call (an approval, a sub-agent), which that
    call's own wait ends."""
    keeps_replies: ClassVar[bool] = False
    """Whether a reply leaves the run waiting: it is queued, and delivered once what the
    run waits for has ended."""
    patch: ClassVar[Patch | None] = None
    """For a kind added after runs existed: the patch its commands wait for."""

    def holds(self, memory: RunMemory) -> bool:
        """Whether a run at a stop point waits for this (unless a kind before it holds)."""
        raise NotImplementedError

    def ends(self, memory: RunMemory) -> bool:
        """Whether a run parked on this may go on: by default, once a reply is queued."""
        return bool(memory.inbox.queued)
