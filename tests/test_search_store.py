"""What every search store does (`tarry.search.SearchStore`): the same specs, run
against each real store of `tests/search_stores.py`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from tarry.cli.processes import free_port
from tarry.contracts import ErrorCode
from tarry.core.errors import TarryError
from tarry.search import (
    SCHEMA_VERSION,
    Readable,
    SearchQuery,
    SearchStore,
    StoreOpener,
    open_store,
)
from tests.search_stores import (
    dropping_proxy,
    empty,
    mark_version,
    open_at,
    request,
    store_of,
)

CARL = Readable("carl", frozenset({"carl", "group:ops"}))


@pytest.fixture
async def store(index_location: str) -> AsyncIterator[SearchStore]:
    async with store_of(index_location) as opened:
        yield opened


async def test_a_message_is_found_by_a_word_with_the_word_marked(store: SearchStore) -> None:
    await store.index(request("r1", "hello", "the pricing page needs a new table"))

    [hit] = await store.search(SearchQuery("Pricing"))

    assert (hit.run_id, hit.index, hit.role) == ("r1", 1, "user")
    assert "[pricing]" in hit.snippet


async def test_a_message_indexed_twice_is_kept_once(store: SearchStore) -> None:
    first = await store.index(request("r1", "the pricing page", "and more"))
    again = await store.index(request("r1", "the pricing page", "and more"))

    assert (first, again) == (2, 0)
    assert await store.count() == 2
    assert len(await store.search(SearchQuery("pricing"))) == 1


async def test_every_word_of_a_query_must_match(store: SearchStore) -> None:
    await store.index(request("r1", "Priya owns the blog", "Priya owns the pricing page"))

    hits = await store.search(SearchQuery("priya blog"))

    assert [h.index for h in hits] == [0]


async def test_punctuation_in_a_query_is_no_syntax_error(store: SearchStore) -> None:
    await store.index(request("r1", "what does AND mean (in a query)?"))

    assert len(await store.search(SearchQuery('"AND" (query* -'))) == 1
    assert await store.search(SearchQuery("?!")) == []


async def test_the_best_match_comes_first(store: SearchStore) -> None:
    await store.index(
        request("r1", "a blog post about many things and the weather", "blog blog blog")
    )

    hits = await store.search(SearchQuery("blog"))

    assert [h.index for h in hits] == [1, 0]
    assert hits[0].score >= hits[1].score


async def test_a_run_the_caller_may_not_read_never_appears(store: SearchStore) -> None:
    await store.index(request("ann-run", "the secret launch date", owner="ann"))

    assert await store.search(SearchQuery("launch", readable=CARL)) == []


async def test_a_run_shared_with_the_caller_or_their_group_appears(store: SearchStore) -> None:
    await store.index(request("to-carl", "launch one", readers=("carl",)))
    await store.index(request("to-ops", "launch two", readers=("group:ops",)))
    await store.index(request("to-dev", "launch three", readers=("group:dev",)))
    await store.index(request("carls", "launch four", owner="carl"))

    hits = await store.search(SearchQuery("launch", readable=CARL))

    assert {h.run_id for h in hits} == {"to-carl", "to-ops", "carls"}


async def test_a_run_without_an_owner_is_found_only_by_who_sees_all(store: SearchStore) -> None:
    await store.index(request("old", "an old launch", owner=None))

    assert await store.search(SearchQuery("launch", readable=CARL)) == []
    assert len(await store.search(SearchQuery("launch"))) == 1


async def test_since_leaves_out_older_messages(store: SearchStore) -> None:
    now = datetime.now(UTC)
    await store.index(request("old", "launch", at=now - timedelta(days=3)))
    await store.index(request("new", "launch", at=now))

    hits = await store.search(SearchQuery("launch", since=now - timedelta(days=1)))

    assert [h.run_id for h in hits] == ["new"]


async def test_agent_keeps_only_that_sub_agents_runs(store: SearchStore) -> None:
    await store.index(request("lead", "launch"))
    await store.index(request("lead:writer-1", "launch"))

    hits = await store.search(SearchQuery("launch", agent="writer"))

    assert [(h.run_id, h.agent) for h in hits] == [("lead:writer-1", "writer")]


async def test_the_limit_bounds_the_hits(store: SearchStore) -> None:
    await store.index(request("r1", *(f"launch {n}" for n in range(30))))

    assert len(await store.search(SearchQuery("launch", limit=5))) == 5


async def test_clear_forgets_everything(store: SearchStore) -> None:
    await store.index(request("r1", "launch"))

    await store.clear()

    assert await store.count() == 0
    assert await store.search(SearchQuery("launch")) == []


async def test_a_store_carries_its_schema_version(store: SearchStore) -> None:
    assert await store.schema_version() == SCHEMA_VERSION


async def test_an_older_store_is_upgraded_when_it_opens(index_location: str) -> None:
    await empty(index_location)
    old = await open_at(index_location, SCHEMA_VERSION - 1)
    await old.close()

    upgraded = await open_store(index_location)
    await upgraded.index(request("r1", "launch"))

    assert await upgraded.schema_version() == SCHEMA_VERSION
    assert len(await upgraded.search(SearchQuery("launch"))) == 1
    await upgraded.close()


async def test_a_store_of_a_newer_schema_is_refused(index_location: str) -> None:
    await empty(index_location)
    await (await open_store(index_location)).close()
    await mark_version(index_location, SCHEMA_VERSION + 1)

    with pytest.raises(RuntimeError, match="newer than this Tarry"):
        await open_store(index_location)


async def test_two_processes_opening_a_new_store_at_once_both_get_it(index_location: str) -> None:
    await empty(index_location)

    stores = await asyncio.gather(*(open_store(index_location) for _ in range(4)))

    assert [await s.schema_version() for s in stores] == [SCHEMA_VERSION] * 4
    for opened in stores:
        await opened.close()


async def test_an_index_that_cannot_be_opened_is_named_without_its_password() -> None:
    port = free_port()  # nothing listens there
    opener = StoreOpener(f"postgresql://tarry:hunter2@127.0.0.1:{port}/tarry_search")

    with pytest.raises(TarryError) as raised:
        await opener.store()

    assert raised.value.code is ErrorCode.SEARCH_UNAVAILABLE
    assert f"postgresql://tarry@127.0.0.1:{port}/tarry_search" in str(raised.value)
    assert "hunter2" not in str(raised.value)


async def test_a_postgres_store_whose_connection_dropped_connects_again(pglite_url: str) -> None:
    async with store_of(pglite_url) as direct, dropping_proxy(pglite_url) as (proxied, drop):
        store = await open_store(proxied)
        await direct.index(request("r1", "launch"))
        drop()

        with pytest.raises(psycopg.OperationalError):
            await store.search(SearchQuery("launch"))
        hits = await store.search(SearchQuery("launch"))

        assert [h.run_id for h in hits] == ["r1"]
        await store.close()


async def test_stores_of_several_processes_index_and_search_at_once(index_location: str) -> None:
    await empty(index_location)
    stores = [await open_store(index_location) for _ in range(4)]

    async def work(store: SearchStore, n: int) -> list[list[str]]:
        found = []
        for round in range(10):
            await store.index(request(f"r{n}-{round}", f"launch{n} round{round}"))
            found.append([h.run_id for h in await store.search(SearchQuery(f"launch{n}"))])
        return found

    results = await asyncio.gather(*(work(store, n) for n, store in enumerate(stores)))

    for n, found in enumerate(results):
        assert [sorted(runs) for runs in found] == [
            sorted(f"r{n}-{r}" for r in range(upto + 1)) for upto in range(10)
        ]
    for store in stores:
        await store.close()
