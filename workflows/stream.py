"""The run's event stream, hosted by the workflow (`temporalio.contrib.workflow_streams`).

The LLM activity publishes an answer's deltas to it as batched signals; the workflow
publishes each transcript message and each stop point itself, which costs no history
(the stream's log lives in the workflow's memory and is rebuilt on replay). At each
continue-as-new only the last turn's events are handed on, so the log does not grow
with the run nor ride along through the chain forever.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamState

from tarry.contracts import ChatMessage, RunState
from tarry.contracts.events import EVENTS_TOPIC, EventKind, RunEvent
from workflows import waits
from workflows.memory import RunMemory


class RunStream(WorkflowStream):
    """The SDK's stream plus what the run publishes to it (messages, stop points) and
    the two reads the workflow needs that its experimental API does not offer yet: the
    current offset, and the words of the answer in flight. Its cursors live in the
    run's memory (`RunMemory.events`), so they travel with every hand-over."""

    def __init__(self, prior_state: WorkflowStreamState | None) -> None:
        # The SDK checks that it is constructed from a method named `__init__`: the
        # workflow's `@workflow.init` constructs this one.
        super().__init__(prior_state)
        self._events = self.topic(EVENTS_TOPIC, type=RunEvent)

    def publish(self, event: RunEvent) -> None:
        self._events.publish(event)

    def offset(self) -> int:
        """The offset the next event gets: where a subscriber picks up from now."""
        return self._base_offset + len(self._log)

    def state_of(self, memory: RunMemory) -> RunState:
        """The run's state, with the stream offsets an observer follows on from."""
        update = {"events": self.offset(), "turn_events": memory.events.turn_events}
        return memory.state(waits.waiting_for(memory)).model_copy(update=update)

    def publish_stop(self, memory: RunMemory) -> None:
        self.publish_messages(memory)
        self.publish(RunEvent(kind=EventKind.STOP, state=self.state_of(memory)))

    def publish_messages(self, memory: RunMemory) -> None:
        """The transcript's messages not published yet."""
        events = memory.events
        for index in range(events.published, memory.conversation.message_count):
            message = memory.conversation.message(index)
            self.publish(RunEvent(kind=EventKind.MESSAGE, index=index, message=message))
        events.published = memory.conversation.message_count

    def begin_turn(self, memory: RunMemory, turn: int) -> None:
        """A turn's events begin with the messages that led to it."""
        events = memory.events
        if turn != events.turn_of_events:
            events.previous_turn_events = events.turn_events
            events.turn_of_events = turn
        events.turn_events = self.offset()
        self.publish_messages(memory)

    def interrupted_answer(self, memory: RunMemory, turn: int) -> ChatMessage | None:
        """A stop cut the answer short: the words the model had written, marked."""
        if words := self.partial_answer(turn, since=memory.events.turn_events):
            return ChatMessage(role="assistant", content=words, interrupted=True)
        return None

    def partial_answer(self, turn: int, since: int) -> str:
        """The words published for `turn` since its latest (re)start, looking no further
        back than offset `since` (the turn's start): what the model had written when its
        answer was cut short."""
        converter = workflow.payload_converter()
        words: list[str] = []
        for item in reversed(self._log[max(0, since - self._base_offset) :]):
            event = converter.from_payload(item.data, RunEvent)
            if event.turn != turn:
                continue
            if event.kind in (EventKind.ANSWER, EventKind.RESET):
                break
            if event.kind is EventKind.TEXT and event.text:
                words.append(event.text)
        return "".join(reversed(words))
