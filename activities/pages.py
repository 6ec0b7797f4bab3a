"""The page activity: a run's older messages into an immutable page of the payload store.

The workflow cannot write to the store itself (it does no I/O), so at a continue-as-new
it hands the messages it no longer needs to this activity and keeps the reference it
answers (see `workflows/pages.py`). Writing is idempotent: the same messages make the
same page (the file driver names it by digest), so a retried attempt stores nothing new.
"""

from __future__ import annotations

from temporalio import activity

from tarry.contracts import PAGE_ACTIVITY, StoredPage, TranscriptPageRef
from tarry.pages import PageStore


class PageWriter:
    """Hosts the page activity over the worker's page store."""

    def __init__(self, pages: PageStore) -> None:
        self._pages = pages

    @activity.defn(name=PAGE_ACTIVITY)
    async def store_transcript_page(self, page: StoredPage) -> TranscriptPageRef:
        return await self._pages.write(page.start, page.messages)
