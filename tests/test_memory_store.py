"""What every memory store does (`tarry.search.MemoryStore`): the same specs, run against
each real store of `tests/search_stores.py` (a store keeps the index and the memories)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tarry.contracts.memories import NewMemory, Provenance
from tarry.search import SCHEMA_VERSION, IndexStore, MemoryStore, SearchQuery, open_store
from tarry.testing.scripted_embeddings import embedding_of
from tests.search_stores import empty, open_at, request, store_of


@pytest.fixture
async def store(index_location: str) -> AsyncIterator[IndexStore]:
    async with store_of(index_location) as opened:
        yield opened


def memory(id: str, text: str, scope: str = "ann", tags: tuple[str, ...] = ()) -> NewMemory:
    return NewMemory(id=id, text=text, tags=list(tags), scope=scope)


async def test_a_remembered_memory_is_kept_with_its_provenance(store: MemoryStore) -> None:
    source = Provenance(run_id="r1", turn=3, approved_by="ann")

    kept = await store.remember(
        NewMemory(
            id="m1", text="Priya owns the blog", tags=["people"], scope="ann", provenance=source
        )
    )

    assert await store.get("m1") == kept
    assert (kept.text, kept.tags, kept.scope, kept.provenance) == (
        "Priya owns the blog",
        ["people"],
        "ann",
        source,
    )
    assert kept.edited is None
    assert kept.deleted is None


async def test_a_memory_remembered_twice_is_kept_once_as_first_written(store: MemoryStore) -> None:
    first = await store.remember(memory("m1", "Priya owns the blog"))

    again = await store.remember(memory("m1", "something else"))

    assert again == first
    assert len(await store.list_memories(None)) == 1


MEANT = "the release went smoothly"
"""A memory with none of `MEANING`'s words, yet near it to the scripted embeddings, which
hash words into 256 buckets: "release" and "went" land in the bucket of "database", with
its sign, so to them the three mean one thing (`embedding_of`: cosine 0.67)."""
MEANING = "database"


async def remembered(store: MemoryStore, id: str, text: str, scope: str = "ann") -> None:
    """Keeps `text` with its scripted embedding, as the `remember` tool does on a worker
    with an embedding profile."""
    await store.remember(memory(id, text, scope), embedding_of(text))


async def test_with_an_embedding_a_memory_of_none_of_the_words_is_recalled_by_meaning(
    store: MemoryStore,
) -> None:
    await remembered(store, "m1", "Priya owns the blog")
    await remembered(store, "m2", MEANT)

    by_words = await store.recall(MEANING, {"ann"})
    by_meaning = await store.recall(MEANING, {"ann"}, embedding=embedding_of(MEANING))

    assert by_words == []
    assert by_meaning[0].text == MEANT


async def test_a_memory_found_by_words_and_meaning_comes_before_one_found_by_meaning(
    store: MemoryStore,
) -> None:
    await remembered(store, "m1", MEANT)
    await remembered(store, "m2", "the database moved to the new server")

    recalled = await store.recall(MEANING, {"ann"}, embedding=embedding_of(MEANING))

    assert [m.id for m in recalled] == ["m2", "m1"]


async def test_recall_by_meaning_keeps_to_its_scopes_and_leaves_deleted_memories(
    store: MemoryStore,
) -> None:
    await remembered(store, "m1", MEANT, scope="bob")
    await remembered(store, "m2", MEANT)
    await store.forget("m2", by="ann")

    assert await store.recall(MEANING, {"ann"}, embedding=embedding_of(MEANING)) == []


async def test_an_edited_text_is_recalled_by_its_new_meaning(store: MemoryStore) -> None:
    await remembered(store, "m1", "Priya owns the blog")

    await store.edit("m1", "ann", text=MEANT, vector=embedding_of(MEANT))

    [recalled] = await store.recall(MEANING, {"ann"}, embedding=embedding_of(MEANING))
    assert recalled.text == MEANT


async def test_recall_finds_a_memory_by_any_word_of_the_query(store: MemoryStore) -> None:
    await store.remember(memory("m1", "Priya owns the blog"))
    await store.remember(memory("m2", "the office is closed on Fridays"))

    recalled = await store.recall("who owns our blog?", {"ann"})

    assert [m.id for m in recalled] == ["m1"]


async def test_recall_finds_a_memory_by_its_tags(store: MemoryStore) -> None:
    await store.remember(memory("m1", "Priya owns the blog", tags=("people",)))

    assert [m.id for m in await store.recall("people", {"ann"})] == ["m1"]


async def test_recall_puts_the_best_match_first(store: MemoryStore) -> None:
    await store.remember(memory("m1", "the blog"))
    await store.remember(memory("m2", "the blog: Priya owns the blog"))

    recalled = await store.recall("Priya blog", {"ann"})

    assert [m.id for m in recalled] == ["m2", "m1"]


async def test_recall_of_no_words_answers_the_newest(store: MemoryStore) -> None:
    for n in range(3):
        await store.remember(memory(f"m{n}", f"fact {n}"))

    recalled = await store.recall("?", {"ann"}, limit=2)

    assert [m.id for m in recalled] == ["m2", "m1"]


async def test_recall_keeps_to_its_scopes(store: MemoryStore) -> None:
    await store.remember(memory("ann's", "the launch is in May", scope="ann"))
    await store.remember(memory("ops'", "the launch needs a runbook", scope="group:ops"))
    await store.remember(memory("bob's", "the launch is secret", scope="bob"))

    recalled = await store.recall("launch", {"ann", "group:ops"})

    assert {m.id for m in recalled} == {"ann's", "ops'"}
    assert len(await store.recall("launch", None)) == 3


async def test_the_limit_bounds_a_recall(store: MemoryStore) -> None:
    for n in range(5):
        await store.remember(memory(f"m{n}", f"launch {n}"))

    assert len(await store.recall("launch", {"ann"}, limit=3)) == 3


async def test_a_forgotten_memory_is_never_recalled_or_listed_again(store: MemoryStore) -> None:
    await store.remember(memory("m1", "Priya owns the blog"))

    forgotten = await store.forget("m1", by="ann")

    assert forgotten is not None
    assert forgotten.deleted_by == "ann"
    assert await store.recall("blog", {"ann"}) == []
    assert await store.recall("", {"ann"}) == []
    assert await store.list_memories({"ann"}) == []
    assert [m.id for m in await store.list_memories({"ann"}, deleted=True)] == ["m1"]


async def test_a_forgotten_memory_keeps_its_provenance(store: MemoryStore) -> None:
    await store.remember(
        NewMemory(id="m1", text="fact", scope="ann", provenance=Provenance(run_id="r1", turn=2))
    )
    await store.forget("m1", by="ann")

    shown = await store.get("m1")

    assert shown is not None
    assert shown.deleted is not None
    assert shown.provenance == Provenance(run_id="r1", turn=2)


async def test_a_forgotten_memory_cannot_be_edited_and_stays_forgotten(store: MemoryStore) -> None:
    await store.remember(memory("m1", "Priya owns the blog"))
    first = await store.forget("m1", by="ann")

    assert await store.edit("m1", "bob", text="Bob owns the blog") is None
    assert await store.forget("m1", by="bob") == first
    assert await store.recall("blog", {"ann"}) == []


async def test_forgetting_or_editing_no_memory_answers_none(store: MemoryStore) -> None:
    assert await store.forget("nothing", by="ann") is None
    assert await store.edit("nothing", "ann", text="x") is None
    assert await store.get("nothing") is None


async def test_an_edited_memory_is_recalled_by_its_new_words_only(store: MemoryStore) -> None:
    await store.remember(memory("m1", "Priya owns the blog", tags=("people",)))

    edited = await store.edit("m1", "ann", text="Sam owns the newsletter")

    assert edited is not None
    assert (edited.text, edited.tags, edited.edited_by) == (
        "Sam owns the newsletter",
        ["people"],
        "ann",
    )
    assert edited.edited is not None
    assert await store.recall("Priya", {"ann"}) == []
    assert [m.id for m in await store.recall("newsletter", {"ann"})] == ["m1"]


async def test_editing_tags_leaves_the_text(store: MemoryStore) -> None:
    await store.remember(memory("m1", "Priya owns the blog"))

    edited = await store.edit("m1", "ann", tags=["owners"])

    assert edited is not None
    assert (edited.text, edited.tags) == ("Priya owns the blog", ["owners"])
    assert [m.id for m in await store.recall("owners", {"ann"})] == ["m1"]


async def test_list_answers_the_scopes_memories_newest_first(store: MemoryStore) -> None:
    await store.remember(memory("old", "one"))
    await store.remember(memory("ops", "two", scope="group:ops"))
    await store.remember(memory("new", "three"))

    assert [m.id for m in await store.list_memories({"ann"})] == ["new", "old"]
    assert [m.id for m in await store.list_memories(None)] == ["new", "ops", "old"]


async def test_clearing_the_index_keeps_the_memories(store: IndexStore) -> None:
    await store.remember(memory("m1", "Priya owns the blog"))
    await store.index(request("r1", "the blog"))

    await store.clear()

    assert await store.search(SearchQuery("blog")) == []
    assert [m.id for m in await store.recall("blog", {"ann"})] == ["m1"]


async def test_a_store_of_the_index_alone_is_upgraded_to_keep_memories(index_location: str) -> None:
    await empty(index_location)
    old = await open_at(index_location, 1)
    await old.index(request("r1", "the blog"))
    await old.close()

    upgraded = await open_store(index_location)
    await upgraded.remember(memory("m1", "Priya owns the blog"))

    assert await upgraded.schema_version() == SCHEMA_VERSION
    assert len(await upgraded.search(SearchQuery("blog"))) == 1
    assert [m.id for m in await upgraded.recall("blog", {"ann"})] == ["m1"]
    await upgraded.close()
