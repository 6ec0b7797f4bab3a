"""What every search store does with embeddings (`SearchStore.index(request, vectors)`,
`SearchQuery.embedding`): hybrid search, by words and by meaning, run against each real
store of `tests/search_stores.py`, with the scripted model's deterministic embeddings
(texts that share words are near)."""

from __future__ import annotations

import math
import random
import struct
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tarry.contracts.search import IndexRequest, SearchHit
from tarry.search import (
    RRF_K,
    DimensionMismatch,
    Readable,
    SearchQuery,
    SearchStore,
    fused,
    open_store,
)
from tarry.search.sqlite import SqliteStore
from tarry.testing.scripted_embeddings import embedding_of
from tests.search_stores import request, sqlite_with_vectors, store_of

CARL = Readable("carl", frozenset({"carl"}))


@pytest.fixture
async def store(index_location: str) -> AsyncIterator[SearchStore]:
    async with store_of(index_location) as opened:
        yield opened


async def index(store: SearchStore, request: IndexRequest) -> int:
    """Indexes `request` with its messages' scripted embeddings, as the index activity does."""
    return await store.index(request, [embedding_of(m.text) for m in request.messages])


def hybrid(text: str, **filters: object) -> SearchQuery:
    return SearchQuery(text, embedding=embedding_of(text), **filters)  # type: ignore[arg-type]


async def test_a_hybrid_search_finds_a_message_without_every_word_of_the_query(
    store: SearchStore,
) -> None:
    await index(store, request("r1", "the pricing page needs a new table"))

    assert await store.search(SearchQuery("pricing spreadsheet")) == []
    [hit] = await store.search(hybrid("pricing spreadsheet"))

    assert (hit.run_id, hit.index) == ("r1", 0)
    assert hit.snippet == "the pricing page needs a new table"


async def test_a_message_found_by_its_words_and_its_meaning_comes_first(
    store: SearchStore,
) -> None:
    await index(store, request("r1", "a blog post about pricing", "the pricing page", "pages"))

    hits = await store.search(hybrid("pricing page"))

    assert (hits[0].index, hits[0].snippet) == (1, "the [pricing] [page]")
    assert hits[0].score == pytest.approx(2 / (RRF_K + 1))


async def test_a_run_the_caller_may_not_read_is_not_found_by_meaning(store: SearchStore) -> None:
    await index(store, request("ann-run", "the secret launch date", owner="ann"))

    assert await store.search(hybrid("launch plans", readable=CARL)) == []


async def test_a_callers_message_is_found_by_meaning_among_many_nearer_they_may_not_read(
    store: SearchStore,
) -> None:
    await index(store, request("ann-run", *(f"launch plans {n}" for n in range(150))))
    await index(store, request("carls", "our launch is on friday", owner="carl"))

    hits = await store.search(hybrid("launch plans", readable=CARL, limit=5))

    assert [h.run_id for h in hits] == ["carls"]


async def test_the_first_vectors_fix_the_dimensions_and_others_are_refused(
    store: SearchStore,
) -> None:
    await index(store, request("r1", "launch"))

    with pytest.raises(DimensionMismatch, match="tarry index rebuild"):
        await store.index(request("r2", "launch"), [[1.0, 0.0]])
    with pytest.raises(DimensionMismatch, match="tarry index rebuild"):
        await store.search(SearchQuery("launch", embedding=[1.0, 0.0]))
    assert await store.dimensions() == len(embedding_of("launch"))


async def test_clear_forgets_the_dimensions(store: SearchStore) -> None:
    await index(store, request("r1", "launch"))

    await store.clear()
    await store.index(request("r1", "launch"), [[1.0, 0.0]])

    assert await store.dimensions() == 2


async def test_a_message_indexed_twice_with_vectors_is_kept_once(store: SearchStore) -> None:
    first = await index(store, request("r1", "launch", "plans"))
    again = await index(store, request("r1", "launch", "plans"))

    assert (first, again) == (2, 0)
    assert len(await store.search(hybrid("launch"))) == 2


async def test_a_store_without_vectors_answers_a_hybrid_search_by_words(
    store: SearchStore,
) -> None:
    await store.index(request("r1", "launch plans"))

    hits = await store.search(hybrid("launch"))

    assert [h.snippet for h in hits] == ["[launch] plans"]


SENTENCE = "priya owns the company blog and writes its newsletter every friday morning"


def known_set() -> tuple[list[str], list[str]]:
    """Many messages of words drawn at random, and among them a few near `SENTENCE`
    (one to five of its words changed): all the messages, and those near ones."""
    draw = random.Random(59)
    vocabulary = [f"w{n}" for n in range(2_000)]
    noise = [" ".join(draw.choices(vocabulary, k=12)) for _ in range(300)]
    near = []
    for changed in range(1, 6):
        words = SENTENCE.split()
        for place in draw.sample(range(len(words)), changed):
            words[place] = draw.choice(vocabulary)
        near.append(" ".join(words))
    return [*noise[:150], *near, *noise[150:]], near


def float_scan(texts: list[str], query: list[float], limit: int) -> list[str]:
    """The `limit` texts nearest `query` by the cosine of every one's floats."""

    def cosine(text: str) -> float:
        vector = embedding_of(text)
        return sum(a * b for a, b in zip(vector, query, strict=True)) / math.hypot(*vector)

    return sorted(texts, key=cosine, reverse=True)[:limit]


async def test_the_nearest_messages_are_those_a_scan_of_every_float_finds(
    store: SearchStore,
) -> None:
    """On SQLite a search scans a copy of one bit a dimension first and re-ranks its
    candidates by their floats; on PostgreSQL an HNSW index finds them: neither loses
    the nearest."""
    texts, near = known_set()
    await index(store, request("r1", *texts))
    meaning = embedding_of(SENTENCE)

    # No message has the word "zyzzyva": what is found, is found by meaning alone.
    hits = await store.search(SearchQuery("zyzzyva", embedding=meaning, limit=5))

    assert [h.snippet for h in hits] == float_scan(texts, meaning, 5)
    assert sorted(h.snippet for h in hits) == sorted(near)


async def test_a_sqlite_index_of_float_vectors_alone_is_searched_by_meaning_once_upgraded(
    tmp_path: Path,
) -> None:
    """A store of schema 3 kept its vectors in a `vec0` table of floats alone; schema 4
    copies them to one bit a dimension, which a search scans first."""
    location = tmp_path / "search.db"
    old = await SqliteStore.open(location, version=3)
    await old.index(request("r1", "the pricing page needs a new table"))
    await old.close()
    with sqlite_with_vectors(location) as db:  # as version 3 kept a message's vector
        floats = embedding_of("the pricing page needs a new table")
        db.execute("INSERT INTO settings (name, value) VALUES ('dimensions', ?)", (len(floats),))
        db.execute(
            f"CREATE VIRTUAL TABLE messages_vec USING vec0(embedding float[{len(floats)}]"
            " distance_metric=cosine)"
        )
        db.execute(
            "INSERT INTO messages_vec (rowid, embedding) SELECT id, ? FROM messages",
            (struct.pack(f"{len(floats)}f", *floats),),
        )

    upgraded = await open_store(str(location))
    hits = await upgraded.search(hybrid("pricing spreadsheet"))
    await upgraded.close()

    assert [(h.run_id, h.index) for h in hits] == [("r1", 0)]


def hit(run_id: str, index: int = 0) -> SearchHit:
    return SearchHit(
        run_id=run_id, index=index, role="user", snippet=run_id, at=datetime.now(UTC), score=0
    )


def test_fusion_ranks_a_hit_in_both_rankings_above_one_in_either() -> None:
    lexical = [hit("words"), hit("both")]
    semantic = [hit("meaning"), hit("both")]

    hits = fused([lexical, semantic], limit=3)

    assert [h.run_id for h in hits] == ["both", "words", "meaning"]
    assert hits[0].score == pytest.approx(2 / (RRF_K + 2))
