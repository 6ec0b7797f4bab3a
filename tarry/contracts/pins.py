"""Pins: messages a person keeps in the model's window, however long the run goes on.

A run sends its model the newest messages that fit the profile's context budget; older
ones fall out of the window, and a long run moves them into pages of the payload store.
A pinned message is sent all the same, before the window, in transcript order. The run
keeps a copy of each (`PinnedMessage`) in the memory it hands over, so a pin outlives
pages and continue-as-new; the copies count against the context budget, and a pin that
would make them alone more than it is refused (`PINS_OVER_BUDGET`).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from tarry.contracts._omit import when_none
from tarry.contracts.audit import Acting
from tarry.contracts.messages import ChatMessage

__all__ = ["PinRequest", "PinnedMessage"]


class PinRequest(Acting):
    """The payload of the `pin` and `unpin` updates: the message, by its transcript index."""

    index: int = Field(ge=0)
    message: ChatMessage | None = Field(default=None, exclude_if=when_none)
    """The message as the client read it from the payload store, for a pin of one the
    run has moved into a page (the workflow cannot read pages); a message the run keeps
    in memory is pinned as the run has it, whatever this says."""


class PinnedMessage(BaseModel):
    """A pinned message: the run's copy of it, as the model is sent it, and where it is."""

    index: int
    """Its transcript index; in an `LlmRequest`, counted from the stored conversation's
    first message (`Conversation.context_from`): negative before it."""
    message: ChatMessage

    @classmethod
    def of(cls, index: int, message: ChatMessage) -> PinnedMessage | None:
        """The pin of `message`, as a model can be sent it apart from its neighbours: an
        answer's text without its tool calls (their results may be out of the window);
        None for a tool's result or a message without text."""
        if message.role == "tool" or not message.content:
            return None
        text = ChatMessage(
            role=message.role, content=message.content, interrupted=message.interrupted
        )
        return cls(index=index, message=text)
