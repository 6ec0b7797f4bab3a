"""The hand-over: a run continues as new, handing its memory to the next run of its chain.

A workflow's history grows with every event, and Temporal warns, then fails, a history too
long. So a run of any length keeps a short one: at a stop point where the hand-over is due
(`due`: its segment's share of turns, the server's suggestion, a new build of its
deployment, a full audit segment), it continues as new under the same workflow id, with
its `RunMemory` as the next run's input (`continue_as_new`). Signals and updates that
arrive meanwhile reach the next run: the server refuses to close this one while it has
unseen events, and the new run starts with everything this one knew.

Hazards:
- What waits before a hand-over. A run closes when it continues as new as much as when it
  ends: a caller owed the next stop point (`send`, `decide`, `raise_budget`, `retry`)
  would lose its answer, and the server drops a closed run's activities, so a
  notification still retrying would be lost (`workflows.notifications`). The hand-over is
  not due while either is in flight. Not `all_handlers_finished()`: an observer's poll of
  the event stream is a handler too, and one is nearly always waiting while someone
  watches.
- Callers in flight while pages are written. A large memory writes its pages first
  (`pages.page_out`), and a caller may come meanwhile: the hand-over asks again whether it
  is due, and when it is not, the run keeps its history until that answer.
- The payload size limit. The next run's input is one payload: one over the workers'
  payload store limit (`RunCatalogue.payload_limit`) would fail this workflow task at
  every attempt, and the run would freeze, unreadable and unstoppable. A memory still over
  it after its pages is refused: the run waits for a person with `PAYLOAD_TOO_LARGE`, and
  the hand-over is not tried again before the next turn.
"""

from __future__ import annotations

from collections.abc import Callable

from temporalio import workflow

from tarry.contracts import ErrorCode, ErrorInfo
from tarry.contracts.compatibility import HAND_OVER
from workflows import audit, builds, pages
from workflows.memory import RunMemory, WorkflowInput
from workflows.stream import RunStream


def due(
    memory: RunMemory, input: WorkflowInput, *, callers: int, sending: bool, refused_at: int | None
) -> bool:
    """Due, and no caller (`callers`) still waits for an answer from this run, nor a
    notification its receiver has not taken (`sending`), nor was it refused at this turn
    (`refused_at`)."""
    reached = (
        memory.conversation.segment_turns >= input.continue_as_new_after_turns
        or workflow.info().is_continue_as_new_suggested()
        or builds.moves_to_new_build()
        or audit.hand_over_due(memory)
    )
    return reached and not callers and not sending and refused_at != memory.conversation.turn


async def continue_as_new(
    memory: RunMemory, input: WorkflowInput, stream: RunStream, still_due: Callable[[], bool]
) -> ErrorInfo | None:
    """Continues as new with the memory: the window of the conversation and the references
    of the pages before it. Returns where the run keeps its history: None for a caller
    come while pages were written (`still_due` says so), else the refusal of a memory too
    large to hand over."""
    workflow.deprecate_patch(HAND_OVER.id)
    next_input = _next_input(memory, input, stream)
    size = pages.payload_size(next_input)
    # Only a large memory waits for pages first: a reply that comes while they are
    # written holds the hand-over off until its answer, and a quick client's next
    # reply would come every time.
    if size > pages.HAND_OVER_BYTES and await pages.page_out(memory):
        if not still_due():
            return None  # a `send` or `decide` caller came while pages were written
        next_input = _next_input(memory, input, stream)
        size = pages.payload_size(next_input)
    if (limit := memory.catalogue.payload_limit) is not None and size > limit:
        refusal = _refusal(size, limit)
        workflow.logger.warning("hand-over refused: %s", refusal.message)
        return refusal
    stream.detach_pollers()  # observers follow the chain to the next run
    # The memo as it is now: the next run would start with this one's first memo,
    # without a summary taken from the first message since (`AgentRunWorkflow._title`).
    workflow.continue_as_new(
        next_input, memo=workflow.memo(), initial_versioning_behavior=builds.next_build()
    )


def _next_input(memory: RunMemory, input: WorkflowInput, stream: RunStream) -> WorkflowInput:
    """The next run's input: this one's, with the memory handed over."""
    # The next run's stream goes on from the same offsets with only the last two
    # turns' events: the rest would ride along through every hand-over. Two, so an
    # observer a turn behind (its polls slowed by the hand-over) still finds its place.
    stream.truncate(memory.events.previous_turn_events)
    handed_over = memory.handed_over(stream.get_state())
    # A fork's first messages are in the memory now: sent again, they'd grow history.
    fork = input.fork and input.fork.model_copy(update={"transcript": []})
    return input.model_copy(update={"memory": handed_over, "fork": fork, "audit": memory.audit})


def _refusal(size: int, limit: int) -> ErrorInfo:
    """Why the run keeps its history and waits: a reply goes on (the hand-over is tried
    again after its turn), a stop ends the run."""
    return ErrorInfo(
        code=ErrorCode.PAYLOAD_TOO_LARGE,
        message=(
            f"the run cannot hand over to the next run of its chain: its memory is "
            f"{size:,} bytes as a payload, over the {limit:,} the workers' "
            f"payload store takes, even with its older messages in pages (the messages "
            f"the model's window holds stay in memory). It keeps its history meanwhile; "
            f"reply to go on, or stop it"
        ),
    )
