"""A run's memory, bounded: older messages move into pages of the payload store.

A run keeps in memory the messages its next model call may be sent (from the window
the context budget chose for the latest call, `RunMemory.window_start`) and the ones
not yet published to its event stream. On the last turn before each continue-as-new it
moves the messages before those into one immutable page, written by the page activity
(the workflow does no I/O) while the model answers, and keeps only the page's
reference: the hand-over then carries a window and references, not the whole
conversation, and a worker's memory stays flat however long its runs last.

Not at the hand-over itself: a reply that came while the page was written would owe
its caller an answer from this run and hold the hand-over off, turn after turn.

The `transcript` query answers the messages in memory, and for a `start` before them
the references of the pages from there on; the client reads those from the store
(`tarry.pages`), so every door still shows the whole conversation.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from tarry.contracts import (
    PAGE_ACTIVITY,
    RunInput,
    StoredPage,
    TranscriptAnswer,
    TranscriptPageRef,
    TranscriptQuery,
)
from workflows.memory import RunMemory

PAGES_PATCH = "transcript-pages"
"""Runs recorded before pages replay with their whole memory; live, they page out on
the last turn of their segment."""
_PAGE_ATTEMPT = timedelta(seconds=30)
_PAGE_WINDOW = timedelta(minutes=5)
"""A store that fails this long costs the run nothing but memory: it hands its messages
over unpaged, and the next segment tries again."""


def due(memory: RunMemory, input: RunInput) -> StoredPage | None:
    """The page to write on the segment's last turn before its hand-over (or a turn the
    server suggested the hand-over before): the messages before the model's window and
    before the first one the event stream has yet to publish. None on other turns, with
    nothing to page, and in runs recorded before pages (only a run that writes pages
    may schedule its model call from a task of its own, as writing one beside it does)."""
    m = memory
    cut = min(m.window_start, m.events.published)
    # Or sooner, when the server suggests the hand-over: a run of huge messages may have
    # every segment end that way, before its last turn.
    suggested = workflow.info().is_continue_as_new_suggested()
    last_turn = suggested or m.segment_turns + 1 == input.continue_as_new_after_turns
    if not last_turn or cut <= m.paged or not workflow.patched(PAGES_PATCH):
        return None
    return StoredPage(start=m.paged, messages=m.transcript[: cut - m.paged])


def answer(memory: RunMemory, query: TranscriptQuery) -> TranscriptAnswer:
    """The `transcript` query's answer: up to `query.limit` messages from `query.start`,
    or, from a start before the messages in memory, up to `query.limit` references of
    the stored pages from there on."""
    m = memory
    total = m.message_count
    if query.start >= m.paged:
        return TranscriptAnswer.of(m.messages_from(query.start), query.start, total, query.limit)
    stored = [page for page in m.pages if page.end > query.start][: query.limit]
    return TranscriptAnswer(messages=[], start=query.start, total=total, stored=stored)


async def write(memory: RunMemory, page: StoredPage) -> None:
    """Stores `page` and drops its messages from memory; a run whose page cannot be
    stored keeps them."""
    end = page.start + len(page.messages) - 1
    try:
        ref = await workflow.execute_activity(
            PAGE_ACTIVITY,
            page,
            result_type=TranscriptPageRef,
            start_to_close_timeout=_PAGE_ATTEMPT,
            schedule_to_close_timeout=_PAGE_WINDOW,
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)),
            summary=f"transcript page · messages {page.start}-{end}",
        )
    except ActivityError as e:
        workflow.logger.warning("the transcript page was not stored; kept in memory: %s", e.cause)
        return
    # Messages may have come while the page was written (a stop's interrupted answer,
    # `set_model`'s note): the page's are still the first, so they go by count.
    del memory.transcript[: len(page.messages)]
    memory.pages.append(ref)
