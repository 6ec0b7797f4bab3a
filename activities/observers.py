"""Publishing a streamed answer to the run's observers, from inside the LLM activity.

The deltas go to the run's workflow stream as batched signals: one signal per batch
interval whatever the number of tokens, so an answer written over 10 s costs the
history about 50 signals, not one event per token. Adjacent deltas of one kind are
merged before they are published, so the stream's log (which the workflow keeps, and
hands on through continue-as-new) also grows per batch, not per token.

History stays bounded by size as well as by time. One answer publishes at most
`PUBLISH_LIMIT` characters of words and tool-call arguments; observers get the rest with
the answer's message, which the workflow publishes whole (out of history, in the
payload store, when it is large). And batches are merged harder as an answer goes on:
the interval grows by `BATCH_INTERVAL` every `BATCHES_PER_STEP` batches, so an answer
written over ten minutes costs about 550 signals, not 3,000.

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
from tarry.contracts.events import EVENTS_TOPIC, EventKind, RunEvent

log = logging.getLogger("tarry.observers")

BATCH_INTERVAL = timedelta(milliseconds=200)
"""How often deltas are published: often enough to read as live, and the bound on the
history cost of streaming (one signal per interval while the model writes)."""
BATCHES_PER_STEP = 50
"""Batches sent at one interval before the next interval grows by `BATCH_INTERVAL`."""
PUBLISH_LIMIT = 128 * 1024
"""The most characters of words and tool-call arguments one answer publishes; a 3 MB
answer would otherwise put 3 MB of signals in history and in the stream's log."""
CLOSE_SECONDS = 5.0
"""The most the last batch may hold up the answer once the stream has ended."""


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
        self._tail: list[str] = []
        """The words of the last pending event while deltas are merged into it, joined
        when it is sealed: a string grown per delta is quadratic in the batch's size."""
        self._ticker: asyncio.Task[None] | None = None
        self._published = False
        self._batches = 0
        self._room = PUBLISH_LIMIT
        """Characters this answer may still publish."""
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
        self._words(EventKind.TEXT, None, delta)

    def tool_call(self, index: int, name: str, call_id: str | None) -> None:
        event = RunEvent(
            kind=EventKind.TOOL_CALL, turn=self._turn, index=index, name=name, call_id=call_id
        )
        self._add(event)

    def tool_arguments(self, index: int, delta: str) -> None:
        self._words(EventKind.TOOL_ARGUMENTS, index, delta)

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

    def _words(self, kind: EventKind, index: int | None, delta: str) -> None:
        """A delta of text or of a call's arguments, merged into the last pending event
        when that is of the same kind (and call)."""
        # Past the limit the words are dropped here; the answer's message has them all.
        text = delta[: self._room]
        if not text:
            return
        self._room -= len(text)
        last = self._pending[-1] if self._tail else None
        if last is not None and (last.kind, last.index) == (kind, index):
            self._tail.append(text)
            return
        self._add(RunEvent(kind=kind, turn=self._turn, index=index, text=text))
        self._tail = [text]

    def _add(self, event: RunEvent) -> None:
        self._seal()
        self._pending.append(event)

    def _seal(self) -> None:
        """Joins the merged words of the last pending event."""
        if len(self._tail) > 1:
            self._pending[-1].text = "".join(self._tail)
        self._tail = []

    async def _send(self) -> None:
        self._seal()
        events, self._pending = self._pending, []
        for event in events:
            self._topic.publish(event)
        # Handed to the client, the answer's beginning will reach observers: marked now,
        # since `close` may cancel the flush below, and must then send the rest.
        self._published = True
        # One signal for the batch; a failed one is kept by the client and sent again
        # (deduplicated by the workflow) with the next batch.
        await self._client.flush()
        self._batches += bool(events)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self._interval * (1 + self._batches // BATCHES_PER_STEP))
            try:
                await self._send()
            except Exception as e:
                log.warning("observers of turn %d missed a batch for now: %r", self._turn, e)
