"""The stores the specs run against (`tests/test_search_store.py`,
`tests/test_memory_store.py`), each a real one: SQLite in a temporary file."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

from tarry.contracts.search import IndexedMessage, IndexedRun, IndexRequest, SearchHit
from tarry.search import IndexStore, SearchQuery, open_store
from tests.deadline import TIMEOUT

STORES = ("sqlite",)


@asynccontextmanager
async def store_of(kind: str, directory: Path) -> AsyncIterator[IndexStore]:
    """A new, empty store of `kind`, closed after."""
    assert kind == "sqlite", kind
    store = await open_store(str(directory / "search.db"))
    try:
        yield store
    finally:
        await store.close()


def request(
    run_id: str,
    *texts: str,
    owner: str | None = "ann",
    readers: tuple[str, ...] = (),
    start: int = 0,
    at: datetime | None = None,
) -> IndexRequest:
    """An index request of run `run_id`'s messages `texts`, from transcript index `start`."""
    when = at or datetime.now(UTC)
    run = IndexedRun(run_id=run_id, owner=owner, readers=list(readers))
    if ":" in run_id:
        run.agent = run_id.rsplit(":", 1)[1].rsplit("-", 1)[0]
    messages = [
        IndexedMessage(index=i, role="user", text=text, at=when)
        for i, text in enumerate(texts, start)
    ]
    return IndexRequest(run=run, messages=messages)


async def until_found(path: Path, text: str, count: int = 1) -> list[SearchHit]:
    """The hits of `text` in the SQLite index at `path`, once there are `count`: a run
    indexes beside what it does, so a message is found a moment after the run shows it."""
    store = await open_store(str(path))
    try:
        async with asyncio.timeout(TIMEOUT):
            while len(hits := await store.search(SearchQuery(text))) < count:
                await asyncio.sleep(0.05)
        return hits
    finally:
        await store.close()
