"""The page activities: a run's older messages into immutable pages of the payload store,
and the references of its oldest pages into immutable indexes.

The workflow cannot write to the store itself (it does no I/O), so it hands the
messages (or page references) it no longer needs to these activities and keeps the
reference they answer (see `workflows/pages.py`). Writing is idempotent: the same
content makes the same page (the file driver names it by digest), so a retried attempt
stores nothing new.
"""

from __future__ import annotations

from temporalio import activity

from tarry.contracts import (
    PAGE_ACTIVITY,
    PAGE_INDEX_ACTIVITY,
    StoredPage,
    StoredPageIndex,
    TranscriptPageIndexRef,
    TranscriptPageRef,
)
from tarry.temporal.pages import PageStore


class PageWriter:
    """Hosts the page activities over the worker's page store."""

    def __init__(self, pages: PageStore) -> None:
        self._pages = pages

    @activity.defn(name=PAGE_ACTIVITY)
    async def store_transcript_page(self, page: StoredPage) -> TranscriptPageRef:
        return await self._pages.write(page.start, page.messages)

    @activity.defn(name=PAGE_INDEX_ACTIVITY)
    async def store_transcript_page_index(self, index: StoredPageIndex) -> TranscriptPageIndexRef:
        return await self._pages.write_index(index)
