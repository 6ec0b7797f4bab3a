"""The `index_messages` activity: a run's new messages into the search index
(`workflows.search_index` says when; `tarry.search` what the index is)."""

from __future__ import annotations

import asyncio

from temporalio import activity

from tarry.contracts.search import INDEX_ACTIVITY, IndexRequest
from tarry.search import SearchStore, open_store


class Indexer:
    """Hosts the index activity over the store at `location`, opened at its first use
    (a worker that never indexes never opens it) and closed with the worker."""

    def __init__(self, location: str) -> None:
        self._location = location
        self._store: SearchStore | None = None
        self._opening = asyncio.Lock()

    async def store(self) -> SearchStore:
        async with self._opening:
            if self._store is None:
                self._store = await open_store(self._location)
            return self._store

    @activity.defn(name=INDEX_ACTIVITY)
    async def index_messages(self, request: IndexRequest) -> int:
        """Indexes the messages not indexed yet; answers how many were new."""
        return await (await self.store()).index(request)

    async def aclose(self) -> None:
        if self._store is not None:
            await self._store.close()
            self._store = None
