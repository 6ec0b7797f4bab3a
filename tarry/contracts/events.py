"""What observers of a run see live: the model's words as it writes them, and the run's
messages and stop points as they happen.

The events travel on the run's workflow stream (`temporalio.contrib.workflow_streams`),
never in the durable transcript: the LLM activity publishes an answer's deltas in
batches, and the workflow publishes each transcript message and each stop point. An
observer reads them with `RunHandle.events()` or `tarry watch`.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field

from tarry.contracts._omit import when_none
from tarry.contracts.guardrails import GuardrailHit
from tarry.contracts.messages import ChatMessage, Usage
from tarry.contracts.run import Retrying, RunState

__all__ = [
    "EVENTS_TOPIC",
    "EventKind",
    "RunEvent",
]

EVENTS_TOPIC = "events"
"""The one topic of a run's stream."""


class EventKind(StrEnum):
    """What a `RunEvent` tells: which of its fields it fills."""

    ANSWER = "answer"
    """The model starts answering for `turn`. Words shown for an earlier attempt of the
    same turn are void: the model was asked again and this answer replaces them."""
    RESET = "reset"
    """Like `answer`, for a retried attempt (the stream of the last one broke off): the
    words shown for this turn so far are void and come again from the start."""
    TEXT = "text"
    """`text` is the next piece of the answer's words."""
    TOOL_CALL = "tool_call"
    """The answer calls tool `name` as call `index` (`call_id` when the provider gives it)."""
    TOOL_ARGUMENTS = "tool_arguments"
    """`text` is the next piece of call `index`'s arguments (JSON text as it grows)."""
    ANSWER_END = "answer_end"
    """The answer is complete: its `usage` and `finish_reason`."""
    MESSAGE = "message"
    """`message` became the transcript's message number `index`."""
    STOP = "stop"
    """The run reached a stop point: it waits for a person, or it ended; `state` says which."""
    GUARDRAIL = "guardrail"
    """`guardrail` redacted or blocked a text: a person's message, a tool's result, or an
    answer (a blocked answer's words are never on the stream)."""
    RETRYING = "retrying"
    """A model or tool call failed and waits for its next attempt (`retrying`). Not on
    the run's stream: `tarry watch` adds it from what Temporal records of the call."""


class RunEvent(BaseModel):
    """One thing an observer of a run sees happen (`RunHandle.events`); `kind` says what,
    and which of the other fields it fills."""

    kind: EventKind
    turn: int = 0
    """The model call the event belongs to (the run's turn number once it is answered)."""
    text: str | None = None
    index: int | None = None
    name: str | None = None
    call_id: str | None = None
    usage: Usage | None = None
    finish_reason: str | None = None
    message: ChatMessage | None = None
    state: RunState | None = None
    retrying: Retrying | None = None
    guardrail: GuardrailHit | None = Field(default=None, exclude_if=when_none)
    offset: int | None = None
    """Where the event is in the run's stream, as `RunHandle.events` read it: `events(
    offset + 1)` resumes after it. Not published: the stream assigns it."""
