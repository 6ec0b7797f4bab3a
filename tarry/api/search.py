"""`/v1/search`: the runs' messages by their words (`tarry.search`), only in the runs the
caller may read, so that neither a run they may not read nor a snippet of it appears."""

from __future__ import annotations

from datetime import datetime
from http import HTTPStatus
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel

from tarry.api.auth import CallerOf
from tarry.api.errors import AUTH, error_answers
from tarry.api.parts import PartsOf
from tarry.contracts.search import SearchHit
from tarry.search import Readable, SearchQuery

__all__ = ["SearchResults", "search_router"]

MAX_QUERY = 1000
"""The longest query text: a search is a few words, not a document."""


class SearchResults(BaseModel):
    hits: list[SearchHit]
    """Best first; each names its run and the message's transcript index, which the run's
    `/transcript?start=` reads and the inbox opens (`#run=RUN&message=N`)."""


def search_router() -> APIRouter:
    router = APIRouter(prefix="/v1/search", tags=["search"])

    @router.get("", responses=error_answers(*AUTH, HTTPStatus.UNPROCESSABLE_ENTITY))
    async def search(
        q: Annotated[str, Query(min_length=1, max_length=MAX_QUERY)],
        since: datetime | None = None,
        agent: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
        limit: Annotated[int, Query(ge=1, le=100)] = 20,
        *,
        caller: CallerOf,
        parts: PartsOf,
    ) -> SearchResults:
        """The messages with every word of `q` (and, with an embedding profile, those near
        it in meaning: hybrid ranking), best first, of the runs the caller may read
        (`[api] visibility`); `since`: written at or after it; `agent`: only that
        sub-agent's runs. 503 `SEARCH_UNAVAILABLE` where the deployment keeps no index."""
        query = SearchQuery(
            q, since, agent, readable=Readable.of(parts.policy, caller), limit=limit
        )
        return SearchResults(hits=await parts.search.search(query))

    return router
