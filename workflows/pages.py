"""A run's memory, bounded: older messages move into pages of the payload store.

A run keeps in memory the messages its next model call may be sent (from the window
the context budget chose for the latest call, `Conversation.window_start`) and the ones
not yet published to its event stream. The messages before those go into immutable
pages, written by the page activity (the workflow does no I/O), and the memory keeps
only the pages' references: a hand-over carries a window and references, not the whole
conversation, and a worker's memory stays flat however long its runs last.

Pages are written at two moments:
- while the model answers, on a turn that has `PAGE_BYTES` of messages to page or that
  foresees the hand-over (`due`). By size, not only on a foreseen last turn: the server
  may suggest the hand-over in the middle of a turn, and with big messages it does so
  turn after turn long before `continue_as_new_after_turns`. A hand-over that carried
  those messages grew by each segment's messages until its input was too large to
  store, and the run could no longer complete a workflow task at all;
- before a hand-over that would carry more than `HAND_OVER_BYTES` (`page_out`): not
  before every one, since a reply that comes while pages are written holds the
  hand-over off until its answer, and a quick client's next reply comes every time.

No page, and no hand-over, is ever larger than the run's payload limit
(`RunCatalogue.payload_limit`): a payload over it fails the workflow task that sends it at
every attempt, so the run would freeze. A page holds at most `PAGE_BYTES` of messages (a
bigger message alone), and a hand-over that would still be over the limit is refused,
the run waiting for a person instead.

The `transcript` query answers the messages in memory, and for a `start` before them
the references of the pages from there on; the client reads those from the store
(`tarry.temporal.pages`), so every door still shows the whole conversation.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TypeVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from tarry.contracts import (
    PAGE_ACTIVITY,
    PAGE_INDEX_ACTIVITY,
    ChatMessage,
    RunInput,
    StoredPage,
    StoredPageIndex,
    TranscriptAnswer,
    TranscriptPageIndexRef,
    TranscriptPageRef,
    TranscriptQuery,
)
from tarry.contracts.compatibility import PAGE_BEFORE_HAND_OVER, PAGE_INDEX, PAGES, SIZED_PAGES
from workflows.memory import RunMemory
from workflows.stage import AskModel, ModelOutcome, RunScope, Stage

Ref = TypeVar("Ref", TranscriptPageRef, TranscriptPageIndexRef)

PAGE_BYTES = 512 * 1024
"""The most JSON of messages a page holds (a bigger message comes alone), and how much
waiting before the window makes a turn write pages: with the window and the event
stream's last two turns, what a hand-over carries."""
HAND_OVER_BYTES = 1024 * 1024
"""A hand-over that would carry more pages out first."""
PAGE_REFS_KEPT = 64
"""Page references a run keeps in memory past this many go into an index of the oldest
`PAGE_REFS_KEPT`, so it keeps between 64 and 127 and an index reference."""
ENVELOPE_BYTES = 4096
"""What a payload adds to its JSON: metadata, and the codec's nonce and tag."""
_PAGE_ATTEMPT = timedelta(seconds=30)
_PAGE_WINDOW = timedelta(minutes=5)
"""A store that fails this long costs the run nothing but memory: it keeps the messages,
and the next turn or hand-over tries again."""


class Paging(Stage):
    """The pages' stage: the pages `due` are written while the model answers, so the
    hand-over after the answer carries the window."""

    async def around_model(self, run: RunScope, ask: AskModel) -> ModelOutcome:
        if not (pages := due(run.memory, run.input)):
            return await ask()
        answer, _ = await asyncio.gather(ask(), write(run.memory, pages))
        return answer


PAGING = Paging()


def due(memory: RunMemory, input: RunInput) -> list[StoredPage]:
    """The pages to write while the model answers: those of the messages before the
    model's window and before the first one the event stream has yet to publish, on a
    turn where they hold `PAGE_BYTES` or more, or where the hand-over is foreseen (the
    segment's last turn, or one the server suggested it before). No pages on other turns,
    with nothing to page, and in runs recorded before pages (only a run that writes
    pages may schedule its model call from a task of its own, as writing one beside it
    does)."""
    m, c = memory, memory.conversation
    if _cut(m) <= c.paged:
        return []
    suggested = workflow.info().is_continue_as_new_suggested()
    last_turn = suggested or c.segment_turns + 1 == input.continue_as_new_after_turns
    if workflow.patched(SIZED_PAGES.id):
        pages, size = _pageable(m)
        return pages if last_turn or size >= PAGE_BYTES else []
    if not last_turn or not workflow.patched(PAGES.id):
        return []
    return [StoredPage(start=c.paged, messages=c.transcript[: _cut(m) - c.paged])]


async def page_out(memory: RunMemory) -> bool:
    """Before a hand-over: writes the pages of every message the model's window and the
    event stream no longer need, in order; what cannot be stored stays in memory. False
    when there was nothing to write."""
    pages, _ = _pageable(memory)
    # An id of its own, asked only at a hand-over: a run frozen by a hand-over too large
    # to store asks it live, when a worker on this code retries its task, and pages out.
    if not pages or not workflow.patched(PAGE_BEFORE_HAND_OVER.id):
        return False
    await write(memory, pages)
    return True


async def write(memory: RunMemory, pages: list[StoredPage]) -> None:
    """Stores `pages`, one after the other, dropping each one's messages from memory; at
    the first that cannot be stored, it and those after it stay in memory."""
    for page in pages:
        end = page.start + len(page.messages) - 1
        summary = f"transcript page · messages {page.start}-{end}"
        ref = await _stored(PAGE_ACTIVITY, page, TranscriptPageRef, summary)
        if ref is None:
            return
        # Messages may have come while the page was written (a stop's interrupted answer,
        # `set_model`'s note): the page's are still the first, so they go by count.
        c = memory.conversation
        del c.transcript[: len(page.messages)]
        c.pages.append(ref)
        if len(c.pages) >= 2 * PAGE_REFS_KEPT and workflow.patched(PAGE_INDEX.id):
            await _index_oldest(memory)


async def _index_oldest(memory: RunMemory) -> None:
    """Moves the oldest `PAGE_REFS_KEPT` page references into a new index, which names
    the previous one; a store that fails leaves them in memory, for the next page."""
    c = memory.conversation
    index = StoredPageIndex(pages=c.pages[:PAGE_REFS_KEPT], previous=c.page_index)
    summary = f"transcript page index · messages up to {index.pages[-1].end - 1}"
    if (ref := await _stored(PAGE_INDEX_ACTIVITY, index, TranscriptPageIndexRef, summary)) is None:
        return
    del c.pages[:PAGE_REFS_KEPT]
    c.page_index = ref


async def _stored(
    activity: str, value: BaseModel, result_type: type[Ref], summary: str
) -> Ref | None:
    """The reference `activity` answers for storing `value`, or None when the store kept
    failing for `_PAGE_WINDOW`: the run then keeps in memory what it would have stored."""
    try:
        ref: Ref = await workflow.execute_activity(
            activity,
            value,
            result_type=result_type,
            start_to_close_timeout=_PAGE_ATTEMPT,
            schedule_to_close_timeout=_PAGE_WINDOW,
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)),
            summary=summary,
        )
    except ActivityError as e:
        workflow.logger.warning("not stored, kept in memory: %s: %s", summary, e.cause)
        return None
    return ref


def payload_size(value: BaseModel) -> int:
    """The size of `value` as the payload the workflow hands Temporal, codec included."""
    [payload] = workflow.payload_converter().to_payloads([value])
    return payload.ByteSize() + ENVELOPE_BYTES


def answer(memory: RunMemory, query: TranscriptQuery) -> TranscriptAnswer:
    """The `transcript` query's answer: up to `query.limit` messages from `query.start`,
    or, from a start before the messages in memory, up to `query.limit` references of
    the stored pages from there on, or, from a start before those too, the newest page
    index."""
    c = memory.conversation
    total = c.message_count
    if query.start >= c.paged:
        return TranscriptAnswer.of(c.messages_from(query.start), query.start, total, query.limit)
    if c.page_index is not None and query.start < c.page_index.end:
        return TranscriptAnswer(messages=[], start=query.start, total=total, index=c.page_index)
    stored = [page for page in c.pages if page.end > query.start][: query.limit]
    return TranscriptAnswer(messages=[], start=query.start, total=total, stored=stored)


def _cut(memory: RunMemory) -> int:
    """The index of the first message the run must keep: the model's window's first, or
    the first the event stream has yet to publish."""
    return min(memory.conversation.window_start, memory.events.published)


def _pageable(memory: RunMemory) -> tuple[list[StoredPage], int]:
    """The messages before `_cut` as pages of at most `PAGE_BYTES` of JSON each (one
    bigger message alone), each under the run's payload limit, and their bytes in all.
    They end before a message no page can hold: it stays in memory, and so do the ones
    after it, since pages follow one another."""
    m, c, limit = memory, memory.conversation, memory.catalogue.payload_limit
    most = PAGE_BYTES
    if limit is not None:
        most = min(most, limit - ENVELOPE_BYTES)
    pages: list[StoredPage] = []
    messages: list[ChatMessage] = []
    start, size, total = c.paged, 0, 0
    for message in c.transcript[: _cut(m) - c.paged]:
        bytes_ = len(message.model_dump_json())
        if limit is not None and bytes_ + ENVELOPE_BYTES > limit:
            break
        if messages and size + bytes_ > most:
            pages.append(StoredPage(start=start, messages=messages))
            start, messages, size = start + len(messages), [], 0
        messages.append(message)
        size += bytes_
        total += bytes_
    if messages:
        pages.append(StoredPage(start=start, messages=messages))
    return pages, total
