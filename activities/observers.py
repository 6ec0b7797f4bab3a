"""Publishing a streamed answer to the run's observers, from inside the LLM activity.

The deltas go to the run's workflow stream as batched signals: one signal per batch
interval whatever the number of tokens, so an answer written over 10 s costs the
history about 50 signals, not one event per token. Adjacent deltas of one kind are
merged before they are published, so the stream's log (which the workflow keeps, and
hands on through continue-as-new) also grows per batch, not per token.

An answer written within one batch interval is not published at all: the workflow
publishes its message the moment it arrives, which shows it whole just as soon, so a
quick answer costs no history. Once a batch has gone out, the rest follows, and so do
the words of an answer a `stop` cuts short, which the workflow keeps.

Publishing never fails the model call: an observer missing a few words is better than
an answer lost. It also never blocks the call's end for long (see `close`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from asyncio import CancelledError
from datetime import timedelta
from types import TracebackType

from temporalio import activity
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from tarry.contracts import Usage
from tarry.events import EVENTS_TOPIC, EventKind, RunEvent

log = logging.getLogger("tarry.observers")

BATCH_INTERVAL = timedelta(milliseconds=200)
"""How often deltas are published: often enough to read as live, and the bound on the
history cost of streaming (one signal per interval while the model writes)."""
CLOSE_SECONDS = 5.0
"""The most the last batch may hold up the answer once the stream has ended."""

_MERGED = (EventKind.TEXT, EventKind.TOOL_ARGUMENTS)


class AnswerObservers:
    """The observers of one attempt at one answer. Use as `async with`; the first event
    published is `answer` (or `reset` on a retried attempt, attempt > 1)."""

    def __init__(self, turn: int, interval: timedelta = BATCH_INTERVAL) -> None:
        # Not `async with` the stream client and no `force_flush`: its flusher can swallow
        # its own cancellation on Python 3.11 and hang the exit until the activity's
        # start-to-close timeout. This class flushes on its own timer instead.
        self._client = WorkflowStreamClient.from_within_activity(batch_interval=interval)
        self._topic = self._client.topic(EVENTS_TOPIC, type=RunEvent)
        self._interval = interval.total_seconds()
        self._turn = turn
        self._pending: list[RunEvent] = []
        self._ticker: asyncio.Task[None] | None = None
        self._published = False
        first = EventKind.RESET if activity.info().attempt > 1 else EventKind.ANSWER
        self._add(RunEvent(kind=first, turn=turn))

    async def __aenter__(self) -> AnswerObservers:
        self._ticker = asyncio.create_task(self._tick())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close(cancelled=exc_type is not None and issubclass(exc_type, CancelledError))

    def text(self, delta: str) -> None:
        self._add(RunEvent(kind=EventKind.TEXT, turn=self._turn, text=delta))

    def tool_call(self, index: int, name: str, call_id: str | None) -> None:
        event = RunEvent(
            kind=EventKind.TOOL_CALL, turn=self._turn, index=index, name=name, call_id=call_id
        )
        self._add(event)

    def tool_arguments(self, index: int, delta: str) -> None:
        self._add(RunEvent(kind=EventKind.TOOL_ARGUMENTS, turn=self._turn, index=index, text=delta))

    def end(self, usage: Usage, finish_reason: str | None) -> None:
        event = RunEvent(
            kind=EventKind.ANSWER_END, turn=self._turn, usage=usage, finish_reason=finish_reason
        )
        self._add(event)

    async def close(self, *, cancelled: bool = False) -> None:
        """Stops the timer and sends what is left if observers have seen this answer
        begin, or the call was `cancelled`: a stopped run keeps the words it was sent.
        Bounded by `CLOSE_SECONDS`."""
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(CancelledError):
                await self._ticker
            self._ticker = None
        if not (self._published or cancelled):
            return
        try:
            async with asyncio.timeout(CLOSE_SECONDS):
                await self._send()
        except Exception as e:  # the answer matters more than its observers
            log.warning("the last words of turn %d did not reach observers: %r", self._turn, e)

    def _add(self, event: RunEvent) -> None:
        last = self._pending[-1] if self._pending else None
        if (
            last is not None
            and event.kind in _MERGED
            and (last.kind, last.index) == (event.kind, event.index)
        ):
            last.text = (last.text or "") + (event.text or "")
        else:
            self._pending.append(event)

    async def _send(self) -> None:
        events, self._pending = self._pending, []
        for event in events:
            self._topic.publish(event)
        # One signal for the batch; a failed one is kept by the client and sent again
        # (deduplicated by the workflow) with the next batch.
        await self._client.flush()
        self._published = True

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self._send()
            except Exception as e:
                log.warning("observers of turn %d missed a batch for now: %r", self._turn, e)
