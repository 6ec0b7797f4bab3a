"""The `index_messages` activity: a run's new messages into the search index
(`workflows.search_index` says when; `tarry.search` what the index is), embedded first
when the worker has an embedding profile (the `embed` model task, `tarry.search.embed`):
the vectors go to the store, and only what embedding used goes back to the run."""

from __future__ import annotations

import httpx
from temporalio import activity

from tarry.config.tables import EmbeddingProfile
from tarry.contracts.search import INDEX_ACTIVITY, IndexAnswer, IndexRequest
from tarry.search import StoreOpener
from tarry.search.embed import Embedder


class Indexer:
    """Hosts the index activity over the worker's store (`TARRY_SEARCH_INDEX`) and its
    embedding profile, if any, asked over `http`."""

    def __init__(
        self,
        stores: StoreOpener,
        embedding: EmbeddingProfile | None = None,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.stores = stores
        self._embedder = Embedder(embedding, http) if embedding is not None else None

    @activity.defn(name=INDEX_ACTIVITY)
    async def index_messages(self, request: IndexRequest) -> IndexAnswer:
        """Indexes the messages not indexed yet, with their embeddings: how many were
        new, and the embedding's usage. A retry embeds them again (its cost is real),
        and indexes nothing twice."""
        store = await self.stores.store()
        if self._embedder is None:
            return IndexAnswer(new=await store.index(request))
        embedded = await self._embedder.embed([m.text for m in request.messages])
        new = await store.index(request, embedded.vectors)
        return IndexAnswer(new=new, usage=embedded.usage)
