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

from tarry.events import EVENTS_TOPIC, EventKind, RunEvent


class RunStream(WorkflowStream):
    """The SDK's stream plus the two reads the workflow needs that its experimental API
    does not offer yet: the current offset, and the words of the answer in flight."""

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
