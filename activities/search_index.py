"""The `index_messages` activity: a run's new messages into the search index
(`workflows.search_index` says when; `tarry.search` what the index is)."""

from __future__ import annotations

from temporalio import activity

from tarry.contracts.search import INDEX_ACTIVITY, IndexRequest
from tarry.search import StoreOpener


class Indexer:
    """Hosts the index activity over the worker's store (`TARRY_SEARCH_INDEX`)."""

    def __init__(self, stores: StoreOpener) -> None:
        self.stores = stores

    @activity.defn(name=INDEX_ACTIVITY)
    async def index_messages(self, request: IndexRequest) -> int:
        """Indexes the messages not indexed yet; answers how many were new."""
        return await (await self.stores.store()).index(request)
