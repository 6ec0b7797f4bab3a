"""Pins: the messages a person keeps in the model's window (`tarry.contracts.pins`).

The run keeps a copy of each pinned message in its memory (`RunMemory.pins`), because
the message itself may move into a page the workflow cannot read; the copies go over
with the rest at every hand-over. Every model request carries them (`sent`), and the
model activity sends those its window leaves out before it. Pins count against the
context budget: a pin that would make them alone more than the run's profile's budget
(or more than `PINS_BYTES`, which a hand-over must carry) is refused, so a run's pins
always leave room for its newest messages and its memory stays bounded.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from tarry.contracts import (
    Act,
    ErrorCode,
    PinnedMessage,
    PinRequest,
    RunState,
    estimate_tokens,
)
from workflows import audit
from workflows.memory import RunMemory, WorkflowInput
from workflows.pages import HAND_OVER_BYTES
from workflows.stage import RunScope

PINS_BYTES = HAND_OVER_BYTES // 4
"""The most JSON a run's pins hold: the hand-over carries them besides the window."""


def pin_problem(
    memory: RunMemory, input: WorkflowInput, request: PinRequest
) -> ApplicationError | None:
    """Why the run refuses to pin `request`'s message: it has ended (`RUN_ENDED`), has no
    such message (`PIN_UNKNOWN_MESSAGE`), cannot send it alone (`PIN_INVALID`), or its
    pins would fill the window (`PINS_OVER_BUDGET`); None to pin it."""
    if problem := memory.ended_problem():
        return problem
    if any(p.index == request.index for p in memory.pins):
        return None  # pinned already: a retry, answered as the first one was
    found = _message_at(memory, request)
    if isinstance(found, ApplicationError):
        return found
    pins = [*memory.pins, found]
    profile = memory.requests.model or input.model
    budget = memory.catalogue.context_budgets.get(profile)
    tokens = sum(estimate_tokens(p.message) for p in pins)
    size = sum(len(p.model_dump_json()) for p in pins)
    if (budget is not None and tokens > budget) or size > PINS_BYTES:
        room = f"{budget} tokens of model profile {profile!r}" if budget else "room"
        return ApplicationError(
            f"pinning message {request.index} would make the run's pinned messages alone"
            f" about {tokens} tokens ({size} bytes), more than its context budget"
            f" ({room}, and at most {PINS_BYTES} bytes): unpin another, or pin a shorter one",
            type=ErrorCode.PINS_OVER_BUDGET,
        )
    return None


def unpin_problem(memory: RunMemory, request: PinRequest) -> ApplicationError | None:
    """`RUN_ENDED`, or `PIN_UNKNOWN_MESSAGE` for a message that is not pinned."""
    if problem := memory.ended_problem():
        return problem
    if all(p.index != request.index for p in memory.pins):
        pinned = ", ".join(str(p.index) for p in memory.pins) or "none"
        return ApplicationError(
            f"message {request.index} is not pinned (pinned: {pinned})",
            type=ErrorCode.PIN_UNKNOWN_MESSAGE,
        )
    return None


def pin(memory: RunMemory, request: PinRequest) -> None:
    """Pins the message `pin_problem` let through, once, and records the act."""
    if any(p.index == request.index for p in memory.pins):
        return
    found = _message_at(memory, request)
    assert isinstance(found, PinnedMessage)  # the validator refused every other case
    memory.pins = sorted([*memory.pins, found], key=lambda p: p.index)
    audit.record(memory, Act.PIN, request, f"pinned message {request.index}")


def unpin(memory: RunMemory, request: PinRequest) -> None:
    memory.pins = [p for p in memory.pins if p.index != request.index]
    audit.record(memory, Act.UNPIN, request, f"unpinned message {request.index}")


def sent(memory: RunMemory) -> list[PinnedMessage]:
    """The pins as a model request carries them: indexed from the stored conversation's
    first message, which is how the model activity knows its window's."""
    start = memory.conversation.context_from
    return [p.model_copy(update={"index": p.index - start}) for p in memory.pins]


def _message_at(memory: RunMemory, request: PinRequest) -> PinnedMessage | ApplicationError:
    """The pin of the message `request` names: the run's own, or, for one it has moved
    into a page, the copy the client read from the store."""
    c, index = memory.conversation, request.index
    if index >= c.message_count:
        return ApplicationError(
            f"the run has no message {index}: it has {c.message_count}, counted from 0",
            type=ErrorCode.PIN_UNKNOWN_MESSAGE,
        )
    if index < c.paged and request.message is None:
        return ApplicationError(
            f"message {index} has moved into a stored page, which the run cannot read: pin"
            " it through Tarry's client (the CLI, the API, the inbox), which reads it there",
            type=ErrorCode.PIN_UNKNOWN_MESSAGE,
        )
    message = c.message(index) if index >= c.paged else request.message
    assert message is not None
    if (pinned := PinnedMessage.of(index, message)) is None:
        return ApplicationError(
            f"message {index} is a tool's result or has no text: a model cannot be sent"
            " it alone; pin the answer that reads it",
            type=ErrorCode.PIN_INVALID,
        )
    return pinned


def install(run: RunScope) -> None:
    """Registers the run's `pin` and `unpin` updates, each answering the run's state."""
    m = run.memory

    def pin_message(request: PinRequest) -> RunState:
        """Keeps a message in the model's window from the next call on."""
        pin(m, request)
        return run.stream.state_of(m)

    def pin_refused(request: PinRequest) -> None:
        if problem := pin_problem(m, run.input, request):
            raise problem

    def unpin_message(request: PinRequest) -> RunState:
        """Lets a pinned message leave the model's window as the others do."""
        unpin(m, request)
        return run.stream.state_of(m)

    def unpin_refused(request: PinRequest) -> None:
        if problem := unpin_problem(m, request):
            raise problem

    workflow.set_update_handler("pin", pin_message, validator=pin_refused)
    workflow.set_update_handler("unpin", unpin_message, validator=unpin_refused)
