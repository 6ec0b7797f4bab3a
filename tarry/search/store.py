"""The interface every search store keeps, and how a location opens one: a store there
keeps the index of the runs' messages and the memories (`IndexStore`)."""

from __future__ import annotations

import asyncio
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import httpx

from tarry.config.tables import EmbeddingProfile
from tarry.contracts import ErrorCode
from tarry.contracts.search import IndexedMessage, IndexedRun, IndexRequest, SearchHit
from tarry.core.errors import TarryError
from tarry.core.identities import Caller
from tarry.core.ownership import Policy, principals
from tarry.search.embed import Embedder, EmbeddingFailed
from tarry.search.memory_store import MemoryStore

__all__ = [
    "RRF_K",
    "SCHEMA_VERSION",
    "DimensionMismatch",
    "IndexStore",
    "IndexedMessage",
    "IndexedRun",
    "MemoryStore",
    "Readable",
    "SearchHit",
    "SearchQuery",
    "SearchStore",
    "StoreOpener",
    "Vector",
    "fuse",
    "fused",
    "open_store",
    "opening",
    "shown",
    "since_of",
    "words_of",
]

SCHEMA_VERSION = 5
"""The store's schema (1: the index; 2: and the memories; 3: and the length of its
messages' embeddings; 4: on SQLite, their vectors in a plain table and a copy of one bit
a dimension; 5: the memories' embeddings), kept in the store; a store of an older one
is upgraded when it opens (each store's `_UPGRADES`), one of a newer one refused."""

_WORD = re.compile(r"\w+")
T = TypeVar("T")


def words_of(text: str) -> list[str]:
    """The words of a query, as each store matches them (all of them, in any order):
    punctuation is no operator, so what a person types cannot be a syntax error."""
    return _WORD.findall(text.lower())


@dataclass(frozen=True)
class Readable:
    """The runs a caller may read: their own (`user`), and those whose readers name one
    of `names` (theirs and their groups', `ownership.principals`)."""

    user: str
    names: frozenset[str]

    @classmethod
    def of(cls, policy: Policy, caller: Caller) -> Readable | None:
        """What `caller` may read under `policy`; None: every run."""
        if policy.sees_all(caller):
            return None
        return cls(caller.user, frozenset(principals(caller)))


@dataclass(frozen=True)
class SearchQuery:
    text: str
    since: datetime | None = None
    """Messages written at or after this; None: any."""
    agent: str | None = None
    """Only the runs of this sub-agent; None: every run."""
    readable: Readable | None = None
    """Only the runs a caller may read; None: every run (an operator's command line)."""
    limit: int = 20
    embedding: Vector | None = None
    """`text`'s embedding by the embedding profile the messages were embedded with (the
    API server and the command line embed the query where the search happens); given,
    the search is hybrid (`SearchStore.search`); None: lexical."""


Vector = Sequence[float]
"""An embedding: as many floats as the store's `dimensions`."""

RRF_K = 60
"""Reciprocal rank fusion's constant: a hit's score is the sum, over the rankings it is
in, of `1 / (RRF_K + rank)`, rank 1 the best (Cormack et al., 2009)."""


class DimensionMismatch(ValueError):
    """Vectors (or a query's embedding) of another length than the store's: the embedding
    profile changed since the store was filled. `tarry index rebuild` starts it anew."""


def fuse(
    rankings: Sequence[Sequence[T]], key: Callable[[T], Hashable], limit: int
) -> list[tuple[T, float]]:
    """The items of several rankings (each best first), the same item in two named by
    `key`, by reciprocal rank fusion (`RRF_K`), each with its score: an item in both ranks
    above one in either alone at the same place. Its first ranking gives the item."""
    scores: dict[Hashable, float] = {}
    items: dict[Hashable, T] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            named = key(item)
            scores[named] = scores.get(named, 0.0) + 1.0 / (RRF_K + rank)
            items.setdefault(named, item)
    best = sorted(scores, key=lambda named: -scores[named])[:limit]
    return [(items[named], scores[named]) for named in best]


def fused(rankings: Sequence[Sequence[SearchHit]], limit: int) -> list[SearchHit]:
    """The hits of several rankings of one search, by `fuse`, `score` the fusion's: a
    hit's first ranking gives its snippet (the lexical one, with the matched words)."""
    best = fuse(rankings, lambda hit: (hit.run_id, hit.index), limit)
    return [hit.model_copy(update={"score": score}) for hit, score in best]


SNIPPET_CHARACTERS = 120
"""The most characters of a message found by meaning alone that its snippet shows."""


def opening(text: str) -> str:
    """The snippet of a message found by meaning alone: its first characters, on one line."""
    flat = " ".join(text.split())
    if len(flat) <= SNIPPET_CHARACTERS:
        return flat
    return flat[:SNIPPET_CHARACTERS].rsplit(" ", 1)[0] + "…"


class SearchStore(ABC):
    """An index of the runs' messages, and of their embeddings when an embedding profile
    is configured. Indexing a message already indexed (the same run and transcript
    index) changes nothing, its vector included."""

    @abstractmethod
    async def index(self, request: IndexRequest, vectors: Sequence[Vector] | None = None) -> int:
        """Indexes `request`'s messages and records its run; answers how many were new.

        `vectors`: the messages' embeddings, one per message of `request.messages` in
        its order, made by the index activity (they never enter a run's history); None:
        no embedding profile, the messages are found by their words alone. The first
        vectors a store holds fix its `dimensions`; others: `DimensionMismatch`."""

    @abstractmethod
    async def search(self, query: SearchQuery) -> list[SearchHit]:
        """The messages `query` finds, best first, at most `query.limit`; none for a
        text without words.

        Lexical (no `query.embedding`): the messages with every word of `query.text`;
        `score` is the store's text rank (higher is better). Hybrid (an embedding): also
        those among the `query.limit` nearest by cosine distance that the query's filters
        (since, agent, readable) keep, ranked by `fused` (`score` is the fusion's), a
        message found by meaning alone with the start of its text as its snippet. A store
        that holds no vectors yet answers the lexical hits; an embedding of another length
        than its `dimensions`: `DimensionMismatch` (a search must not quietly lose its
        meaning)."""

    @abstractmethod
    async def dimensions(self) -> int | None:
        """The length of the store's vectors, fixed by the first it was given and kept
        in it (a `vec0` or `vector(n)` column needs it); None: it holds none. `clear`
        forgets it, so a rebuild under another embedding profile takes its length."""

    @abstractmethod
    async def count(self) -> int:
        """How many messages are indexed."""

    @abstractmethod
    async def clear(self) -> None:
        """Forgets every run and message (a rebuild starts from nothing)."""

    @abstractmethod
    async def schema_version(self) -> int:
        """The version of the schema the store holds."""

    @abstractmethod
    async def close(self) -> None: ...


class IndexStore(SearchStore, MemoryStore):
    """What a location (`TARRY_SEARCH_INDEX`) holds: the index and the memories, in one
    store with one schema version."""


POSTGRES = ("postgresql://", "postgres://")
"""How a location that names a PostgreSQL database begins (libpq's URLs)."""


async def open_store(location: str) -> IndexStore:
    """The store at `location` (`TARRY_SEARCH_INDEX`): a PostgreSQL database's URL
    (`postgresql://USER:PASSWORD@HOST/DATABASE`), or else a SQLite file's path; created
    with its schema if there is none, or upgraded to `SCHEMA_VERSION`. Each store's
    module is imported here: a deployment on one needs nothing of the other."""
    if location.startswith(POSTGRES):
        from tarry.search.postgres import PostgresStore

        return await PostgresStore.open(location)
    from tarry.search.sqlite import SqliteStore

    return await SqliteStore.open(Path(location))


_USER_PASSWORD = re.compile(r"(://[^:/@]*):[^@/]*@")
_PASSWORD_PARAMETER = re.compile(r"([?&]password=)[^&]*")


def shown(location: str) -> str:
    """`location` as a message may show it: a URL's password left out."""
    return _PASSWORD_PARAMETER.sub(r"\1…", _USER_PASSWORD.sub(r"\1@", location))


class StoreOpener:
    """One process's store at `location`, opened at its first use (a worker that never
    indexes, a server never searched, never opens it) and kept until `aclose`; with an
    `embedding` profile (asked over `http`, a pool of the caller's, or one of its own),
    its searches are hybrid (`search`), and it embeds memories (`embedding_of`)."""

    def __init__(
        self,
        location: str | None,
        embedding: EmbeddingProfile | None = None,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self._location = location
        self._store: IndexStore | None = None
        self._opening = asyncio.Lock()
        self._embedder = Embedder(embedding, http) if embedding is not None else None

    async def search(self, query: SearchQuery) -> list[SearchHit]:
        """`query`'s hits, its text embedded first with the embedding profile (a hybrid
        search); `SEARCH_UNAVAILABLE` when the store cannot be opened, the query cannot be
        embedded, or the index's vectors are another profile's."""
        store = await self.store()
        if (vector := await self.embedding_of(query.text)) is not None:
            query = replace(query, embedding=vector)
        try:
            return await store.search(query)
        except DimensionMismatch as e:
            raise TarryError(ErrorCode.SEARCH_UNAVAILABLE, str(e)) from None

    async def embedding_of(self, text: str) -> Vector | None:
        """`text`'s embedding by the embedding profile; None without one, or for a text
        of no words; `SEARCH_UNAVAILABLE` when the model cannot embed it."""
        if self._embedder is None or not words_of(text):
            return None
        try:
            [vector] = (await self._embedder.embed([text])).vectors
        except (EmbeddingFailed, httpx.HTTPError) as e:
            raise TarryError(
                ErrorCode.SEARCH_UNAVAILABLE,
                f"{text[:40]!r} cannot be embedded for semantic search ({type(e).__name__}:"
                f" {e}); is the embedding model ([embedding], TARRY_EMBEDDING) up?",
            ) from None
        return vector

    async def store(self) -> IndexStore:
        """The store; `SEARCH_UNAVAILABLE` when there is none or it cannot be opened."""
        if self._location is None:
            raise TarryError(
                ErrorCode.SEARCH_UNAVAILABLE,
                "this deployment keeps no search index: set TARRY_SEARCH_INDEX (a SQLite"
                " file's path, or a postgresql:// URL) for its workers and its API alike;"
                " `tarry dev` sets it",
            )
        async with self._opening:
            if self._store is None:
                try:
                    self._store = await open_store(self._location)
                except Exception as e:
                    raise TarryError(
                        ErrorCode.SEARCH_UNAVAILABLE,
                        f"the search index {shown(self._location)} cannot be opened"
                        f" ({type(e).__name__}: {e})",
                    ) from None
            return self._store

    async def aclose(self) -> None:
        if self._embedder is not None:
            await self._embedder.aclose()
        if self._store is not None:
            await self._store.close()
            self._store = None


_AGO = re.compile(r"(\d+)([mhdw])")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def since_of(text: str, now: datetime | None = None) -> datetime:
    """A `--since`: a time ago (`30m`, `12h`, `7d`, `2w`), or an ISO 8601 date or time
    (UTC unless it says); `INPUT_INVALID` otherwise."""
    if found := _AGO.fullmatch(text.strip()):
        ago = timedelta(**{_UNITS[found.group(2)]: int(found.group(1))})
        return (now or datetime.now(UTC)) - ago
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise TarryError(
            ErrorCode.INPUT_INVALID,
            f"--since {text!r}: not a time ago (30m, 12h, 7d, 2w) or an ISO 8601 date or"
            " time (2026-11-01)",
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
