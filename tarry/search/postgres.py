"""The team's store: PostgreSQL, its words in `tsvector` columns with GIN indexes: the
index of the runs' messages, and the memories, in tables of their own.

Each store (a worker's, an API server's) keeps one connection, used by one request at a
time (`_lock`), each request one transaction: a worker killed mid-request leaves the
index as it was before it. One connection a process is what the index needs (a write is
one statement per table, a search one or two queries), and the connection's use keeps
to what the suite's server allows. PGlite (scripts/pglite/serve.mjs) is one Postgres
session that pglite-socket shares among at most the clients it was started for (it
refuses more): it runs their protocol messages one at a time, in arrival order, except
that while one client is in a transaction only its messages run. So every statement
here runs inside a transaction (`_run`, `_upgrade`): outside one, another client's
message could fall between a statement's Parse and its Execute. Nothing is left in the
session: no prepared statement (`_connect`), no setting but `SET LOCAL`. A connection
the server dropped is opened again at the next request; the request that found it
dropped fails, and its activity's retry or the person's next search goes through.

Words are Postgres's `simple` configuration: lower-cased, unstemmed, no stop words, as
SQLite's `unicode61` tokenizer makes them, so a query matches the same messages on both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Sequence
from datetime import UTC, datetime
from typing import Any, LiteralString, TypeVar

from psycopg import AsyncConnection

from tarry.contracts.memories import Memory, NewMemory, Provenance
from tarry.contracts.search import IndexRequest, SearchHit
from tarry.search.store import (
    SCHEMA_VERSION,
    DimensionMismatch,
    IndexStore,
    SearchQuery,
    Vector,
    fuse,
    fused,
    opening,
    shown,
    words_of,
)

__all__ = ["PostgresStore"]

T = TypeVar("T")
Connection = AsyncConnection[tuple[Any, ...]]

_UPGRADES: dict[int, tuple[LiteralString, ...]] = {
    1: (
        "CREATE TABLE search_schema (version integer NOT NULL)",
        "INSERT INTO search_schema (version) VALUES (0)",
        "CREATE TABLE runs (run_id text PRIMARY KEY, owner text, agent text)",
        "CREATE TABLE run_readers (run_id text NOT NULL, name text NOT NULL,"
        " PRIMARY KEY (run_id, name))",
        "CREATE INDEX run_readers_by_name ON run_readers (name)",
        "CREATE TABLE messages (id bigserial PRIMARY KEY, run_id text NOT NULL,"
        " idx integer NOT NULL, role text NOT NULL, text text NOT NULL,"
        " at timestamptz NOT NULL, words tsvector NOT NULL"
        " GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED, UNIQUE (run_id, idx))",
        "CREATE INDEX messages_by_words ON messages USING gin (words)",
        # The messages' embeddings, of the length the first fix (`_fix_dimensions`, which
        # makes their HNSW index: a column of no length takes any, an index needs one).
        "CREATE EXTENSION IF NOT EXISTS vector",
        "CREATE TABLE message_vectors (id bigint PRIMARY KEY"
        " REFERENCES messages (id) ON DELETE CASCADE, embedding vector NOT NULL)",
    ),
    2: (
        # `words`: the text's and the tags' (kept by `remember` and `edit`, as a generated
        # column may not use array_to_string); a deleted memory's are NULL, so no recall
        # can find it.
        "CREATE TABLE memories (n bigserial PRIMARY KEY, id text NOT NULL UNIQUE,"
        " text text NOT NULL, tags text[] NOT NULL, scope text NOT NULL, run_id text,"
        " turn integer, approved_by text, created timestamptz NOT NULL,"
        " edited timestamptz, edited_by text, deleted timestamptz, deleted_by text,"
        " words tsvector)",
        "CREATE INDEX memories_by_scope ON memories (scope, created)",
        "CREATE INDEX memories_by_words ON memories USING gin (words)",
    ),
    # SQLite's 3 keeps its vectors' length; here `message_vectors` has kept it since 1.
    3: (),
    # SQLite's 4 copies its vectors a bit a dimension; here the HNSW index finds them.
    4: (),
    # The memories' embeddings: each its own length, read by recall alone (few a scope).
    5: ("ALTER TABLE memories ADD COLUMN embedding vector",),
}
"""The statements that bring a store of version N-1 to N; version 0 is an empty database
(or schema): step 1 makes the table that keeps the version."""

_UPGRADING = 0x7461727279
"""The advisory lock that processes opening one database at once take in turn, so one
of them takes each upgrade step and the others find it taken; and that the first vectors'
writers take, so one of them fixes the store's dimensions."""

_HEADLINE = "StartSel=[, StopSel=], MaxWords=16, MinWords=8"
"""ts_headline's options: a short excerpt around the words, each marked `[word]`, as the
SQLite store's `snippet` marks them."""


_MEMORY = (
    "SELECT m.id, m.text, m.tags, m.scope, m.run_id, m.turn, m.approved_by, m.created,"
    " m.edited, m.edited_by, m.deleted, m.deleted_by FROM memories m"
)


class PostgresStore(IndexStore):
    def __init__(self, location: str, connection: Connection) -> None:
        self._location = location
        self._db = connection
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, location: str, *, version: int = SCHEMA_VERSION) -> PostgresStore:
        """The store in the database at `location` (a `postgresql://` URL), brought to
        `version` (a test may ask for an older one)."""
        db = await _connect(location)
        try:
            await _upgrade(db, location, version)
        except BaseException:
            await db.close()
            raise
        return cls(location, db)

    async def _run(self, work: Callable[[Connection], Awaitable[T]]) -> T:
        """`work` in one transaction on the store's connection, opened again if the
        server dropped it."""
        async with self._lock:
            if self._db.closed:
                self._db = await _connect(self._location)
            async with self._db.transaction():
                return await work(self._db)

    async def index(self, request: IndexRequest, vectors: Sequence[Vector] | None = None) -> int:
        run = request.run
        messages = request.messages
        if vectors is not None and len(vectors) != len(messages):
            raise ValueError(f"{len(vectors)} vectors for {len(messages)} messages")

        async def write(db: Connection) -> int:
            if vectors:
                await _fix_dimensions(db, {len(v) for v in vectors})
            await db.execute(
                "INSERT INTO runs (run_id, owner, agent) VALUES (%s, %s, %s)"
                " ON CONFLICT (run_id) DO NOTHING",
                (run.run_id, run.owner, run.agent),
            )
            await db.execute(
                "INSERT INTO run_readers (run_id, name) SELECT %s, unnest(%s::text[])"
                " ON CONFLICT DO NOTHING",
                (run.run_id, run.readers),
            )
            written = await db.execute(
                "INSERT INTO messages (run_id, idx, role, text, at)"
                " SELECT %s, * FROM unnest(%s::integer[], %s::text[], %s::text[],"
                " %s::timestamptz[]) ON CONFLICT (run_id, idx) DO NOTHING RETURNING idx, id",
                (
                    run.run_id,
                    [m.index for m in messages],
                    [m.role for m in messages],
                    [m.text for m in messages],
                    [m.at for m in messages],
                ),
            )
            new: dict[int, int] = dict(await written.fetchall())
            if vectors and new:
                # The new messages' vectors only: one indexed before keeps its own.
                kept = [
                    (new[m.index], _literal(v))
                    for m, v in zip(messages, vectors, strict=True)
                    if m.index in new
                ]
                await db.execute(
                    "INSERT INTO message_vectors (id, embedding)"
                    " SELECT id, embedding::vector FROM unnest(%s::bigint[], %s::text[])"
                    " AS v (id, embedding)",
                    ([id for id, _ in kept], [vector for _, vector in kept]),
                )
            return len(new)

        return await self._run(write)

    async def search(self, query: SearchQuery) -> list[SearchHit]:
        words = words_of(query.text)
        if not words:
            return []
        where, args = _filters(query)
        matched = " & ".join(f"'{w}'" for w in words)

        async def read(db: Connection) -> list[SearchHit]:
            lexical = await _lexical(db, matched, where, args, query.limit)
            if query.embedding is None or (dimensions := await _dimensions(db)) is None:
                return lexical
            if len(query.embedding) != dimensions:
                raise DimensionMismatch(
                    f"the query's embedding has {len(query.embedding)} dimensions, the"
                    f" index's vectors {dimensions}: the embedding profile changed since"
                    " they were made; `tarry index rebuild` makes them anew"
                )
            near = await _semantic(db, query.embedding, dimensions, where, args, query.limit)
            return fused([lexical, near], query.limit)

        return await self._run(read)

    async def dimensions(self) -> int | None:
        return await self._run(_dimensions)

    async def count(self) -> int:
        async def count(db: Connection) -> int:
            row = await (await db.execute("SELECT count(*) FROM messages")).fetchone()
            return int(row[0]) if row else 0

        return await self._run(count)

    async def clear(self) -> None:
        async def clear(db: Connection) -> None:
            await db.execute("TRUNCATE message_vectors, messages, run_readers, runs")
            await db.execute("DROP INDEX IF EXISTS message_vectors_near")

        await self._run(clear)

    async def remember(self, memory: NewMemory, vector: Vector | None = None) -> Memory:
        source = memory.provenance

        async def write(db: Connection) -> Memory:
            await db.execute(
                "INSERT INTO memories (id, text, tags, scope, run_id, turn, approved_by,"
                " created, embedding) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s::vector)"
                " ON CONFLICT (id) DO NOTHING",
                (
                    memory.id,
                    memory.text,
                    memory.tags,
                    memory.scope,
                    source.run_id,
                    source.turn,
                    source.approved_by,
                    datetime.now(UTC),
                    None if vector is None else _literal(vector),
                ),
            )
            await _reword(db, memory.id)
            return (await _memories(db, " WHERE m.id = %s", [memory.id]))[0]

        return await self._run(write)

    async def recall(
        self,
        query: str,
        scopes: Collection[str] | None,
        limit: int = 10,
        embedding: Vector | None = None,
    ) -> list[Memory]:
        words = words_of(query)
        where, args = _in_scopes(scopes)
        if not words:
            rest = f"{where} ORDER BY m.created DESC, m.n DESC LIMIT %s"
            return await self._run(lambda db: _memories(db, rest, [*args, limit]))
        # Any word, best first: a question's other words ("who", "the") need not be in it.
        rest = (
            f", to_tsquery('simple', %s) q{where} AND m.words @@ q"
            " ORDER BY ts_rank(m.words, q) DESC, m.n DESC LIMIT %s"
        )
        matched = " | ".join(f"'{w}'" for w in words)
        if embedding is None:
            return await self._run(lambda db: _memories(db, rest, [matched, *args, limit]))
        near = (
            f"{where} AND vector_dims(m.embedding) = %s"
            " ORDER BY m.embedding <=> %s::vector, m.n DESC LIMIT %s"
        )

        async def read(db: Connection) -> list[Memory]:
            lexical = await _memories(db, rest, [matched, *args, limit])
            nearest = [*args, len(embedding), _literal(embedding), limit]
            semantic = await _memories(db, near, nearest)
            return [m for m, _ in fuse([lexical, semantic], lambda m: m.id, limit)]

        return await self._run(read)

    async def get(self, memory_id: str) -> Memory | None:
        found = await self._run(lambda db: _memories(db, " WHERE m.id = %s", [memory_id]))
        return found[0] if found else None

    async def list_memories(
        self, scopes: Collection[str] | None, limit: int = 100, *, deleted: bool = False
    ) -> list[Memory]:
        where, args = _in_scopes(scopes, deleted=deleted)
        rest = f"{where} ORDER BY m.created DESC, m.n DESC LIMIT %s"
        return await self._run(lambda db: _memories(db, rest, [*args, limit]))

    async def edit(
        self,
        memory_id: str,
        by: str,
        *,
        text: str | None = None,
        tags: list[str] | None = None,
        vector: Vector | None = None,
    ) -> Memory | None:
        async def write(db: Connection) -> Memory | None:
            # A new text: its vector, or none.
            await db.execute(
                "UPDATE memories SET text = coalesce(%s, text), tags = coalesce(%s, tags),"
                " embedding = CASE WHEN %s THEN %s::vector ELSE embedding END,"
                " edited = %s, edited_by = %s WHERE id = %s AND deleted IS NULL",
                (
                    text,
                    tags,
                    text is not None,
                    None if vector is None else _literal(vector),
                    datetime.now(UTC),
                    by,
                    memory_id,
                ),
            )
            await _reword(db, memory_id)
            found = await _memories(db, " WHERE m.id = %s AND m.deleted IS NULL", [memory_id])
            return found[0] if found else None

        return await self._run(write)

    async def forget(self, memory_id: str, by: str) -> Memory | None:
        async def write(db: Connection) -> Memory | None:
            await db.execute(
                "UPDATE memories SET deleted = %s, deleted_by = %s, words = NULL"
                " WHERE id = %s AND deleted IS NULL",
                (datetime.now(UTC), by, memory_id),
            )
            found = await _memories(db, " WHERE m.id = %s", [memory_id])
            return found[0] if found else None

        return await self._run(write)

    async def schema_version(self) -> int:
        return await self._run(_version)

    async def close(self) -> None:
        async with self._lock:
            await self._db.close()


_HIT = "m.run_id, m.idx, m.role, m.at, r.agent"
"""What a query selects of a hit, before its score and its snippet (`_hit`)."""


def _filters(query: SearchQuery) -> tuple[str, list[object]]:
    """The conditions of `query` besides its words and meaning (`AND ...`, on messages
    `m` and runs `r`), and their values."""
    where: list[str] = []
    args: list[object] = []
    if query.since is not None:
        where.append(" AND m.at >= %s")
        args.append(query.since)
    if query.agent is not None:
        where.append(" AND r.agent = %s")
        args.append(query.agent)
    if (readable := query.readable) is not None:
        where.append(
            " AND (r.owner = %s OR EXISTS (SELECT 1 FROM run_readers n"
            " WHERE n.run_id = m.run_id AND n.name = ANY(%s)))"
        )
        args += [readable.user, sorted(readable.names)]
    return "".join(where), args


async def _lexical(
    db: Connection, matched: str, where: str, args: list[object], limit: int
) -> list[SearchHit]:
    """The `limit` messages with every word of `matched` (a tsquery) that the filters keep,
    best first (`ts_rank`), each with its words marked."""
    # The headlines of the best rows only: made in the inner query, one would be made for
    # every row that matched, before the sort.
    sql = (
        f"SELECT {_HIT.replace('m.', 'best.').replace('r.', 'best.')}, best.score,"
        f" ts_headline('simple', best.text, best.query, '{_HEADLINE}'), best.text"
        f" FROM (SELECT {_HIT}, m.text, q.query, ts_rank(m.words, q.query) AS score"
        " FROM (SELECT to_tsquery('simple', %s) AS query) q, messages m"
        f" JOIN runs r ON r.run_id = m.run_id WHERE m.words @@ q.query{where}"
        " ORDER BY score DESC, m.id LIMIT %s) best ORDER BY best.score DESC"
    )
    rows = await (await db.execute(sql, [matched, *args, limit])).fetchall()
    return [
        _hit(run_id, index, role, at, agent, score, _excerpt(headline, text))
        for run_id, index, role, at, agent, score, headline, text in rows
    ]


def _excerpt(headline: str, text: str) -> str:
    """`headline` (a part of `text`, its words marked) with `…` where it leaves `text`
    out, before or after, as SQLite's `snippet` shows it."""
    shown = " ".join(headline.replace("[", "").replace("]", "").split())
    whole = " ".join(text.split())
    before = "" if whole.startswith(shown) else "…"
    after = "" if whole.endswith(shown) else "…"
    return f"{before}{headline}{after}"


async def _semantic(
    db: Connection,
    embedding: Vector,
    dimensions: int,
    where: str,
    args: list[object],
    limit: int,
) -> list[SearchHit]:
    """The `limit` messages nearest `embedding` by cosine distance that the filters keep,
    nearest first, each with the start of its text. The HNSW index's scan goes on past
    the nearest it first finds until enough pass the filters (pgvector 0.8's iterative
    scan, in order): a caller who may read few of many runs still finds theirs."""
    await db.execute("SET LOCAL hnsw.iterative_scan = strict_order")
    near = f"v.embedding::vector({dimensions}) <=> %s::vector({dimensions})"
    sql = (
        f"SELECT {_HIT}, 1 - ({near}), m.text FROM message_vectors v"
        " JOIN messages m ON m.id = v.id JOIN runs r ON r.run_id = m.run_id"
        f" WHERE true{where} ORDER BY {near} LIMIT %s"
    )
    vector = _literal(embedding)
    rows = await (await db.execute(sql, [vector, *args, vector, limit])).fetchall()
    return [
        _hit(run_id, index, role, at, agent, score, opening(text))
        for run_id, index, role, at, agent, score, text in rows
    ]


def _hit(
    run_id: str, index: int, role: str, at: datetime, agent: str | None, score: float, snippet: str
) -> SearchHit:
    return SearchHit(
        run_id=run_id,
        index=index,
        role=role,
        at=at.astimezone(UTC),
        agent=agent,
        score=score,
        snippet=snippet,
    )


def _literal(vector: Vector) -> str:
    """`vector` as pgvector reads a `vector` from text."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


async def _dimensions(db: Connection) -> int | None:
    """The length of the store's vectors: that of any (they all have it); None: none."""
    row = await (
        await db.execute("SELECT vector_dims(embedding) FROM message_vectors LIMIT 1")
    ).fetchone()
    return int(row[0]) if row else None


async def _fix_dimensions(db: Connection, lengths: set[int]) -> None:
    """Checks that vectors of `lengths` fit the store, fixing its dimensions with the first
    (and making their HNSW index, which needs them); `DimensionMismatch` for any other."""
    dimensions = await _dimensions(db)
    if dimensions is None:
        # The first vectors: one process at a time fixes the length (and makes the index).
        await db.execute("SELECT pg_advisory_xact_lock(%s)", (_UPGRADING,))
        dimensions = await _dimensions(db)
    if dimensions is None and len(lengths) == 1:
        [dimensions] = lengths
        await db.execute(
            "CREATE INDEX IF NOT EXISTS message_vectors_near ON message_vectors"
            f" USING hnsw ((embedding::vector({dimensions})) vector_cosine_ops)"
        )
    if lengths - {dimensions}:
        raise DimensionMismatch(
            f"vectors of {sorted(lengths)} dimensions for an index of {dimensions}: the"
            " embedding profile changed since it was filled; `tarry index rebuild` makes"
            " every vector anew"
        )


def _in_scopes(
    scopes: Collection[str] | None, *, deleted: bool = False
) -> tuple[str, list[object]]:
    """The WHERE clause that keeps the memories of `scopes` (None: all), and its values."""
    clauses = [] if deleted else ["m.deleted IS NULL"]
    args: list[object] = []
    if scopes is not None:
        clauses.append("m.scope = ANY(%s)")
        args.append(sorted(scopes))
    return (f" WHERE {' AND '.join(clauses)}" if clauses else " WHERE true"), args


async def _reword(db: Connection, memory_id: str) -> None:
    """Keeps the words of the memory `memory_id` that `recall` finds: its text's and its
    tags' (a deleted one's stay NULL)."""
    await db.execute(
        "UPDATE memories SET words = to_tsvector('simple', text || ' '"
        " || array_to_string(tags, ' ')) WHERE id = %s AND deleted IS NULL",
        (memory_id,),
    )


async def _memories(db: Connection, rest: str, args: list[object]) -> list[Memory]:
    """The memories `_MEMORY` + `rest` selects, as the store's answers."""
    rows = await (await db.execute(_MEMORY + rest, args)).fetchall()
    return [_memory(*row) for row in rows]


def _memory(
    id: str,
    text: str,
    tags: list[str],
    scope: str,
    run_id: str | None,
    turn: int | None,
    approved_by: str | None,
    created: datetime,
    edited: datetime | None,
    edited_by: str | None,
    deleted: datetime | None,
    deleted_by: str | None,
) -> Memory:
    def moment(at: datetime | None) -> datetime | None:
        return None if at is None else at.astimezone(UTC)

    return Memory(
        id=id,
        text=text,
        tags=tags,
        scope=scope,
        provenance=Provenance(run_id=run_id, turn=turn, approved_by=approved_by),
        created=created.astimezone(UTC),
        edited=moment(edited),
        edited_by=edited_by,
        deleted=moment(deleted),
        deleted_by=deleted_by,
    )


async def _connect(location: str) -> Connection:
    # Autocommit: each request's transaction is `_run`'s own, and nothing is left open
    # between requests (on PGlite, an open transaction holds every other client back).
    # No server-side prepared statements (psycopg prepares a query run 5 times): PGlite's
    # clients share its one session, where one's `_pg3_0` is another's (as a pooler's in
    # transaction mode share theirs).
    return await AsyncConnection.connect(location, autocommit=True, prepare_threshold=None)


async def _version(db: Connection) -> int:
    row = await (await db.execute("SELECT to_regclass('search_schema') IS NOT NULL")).fetchone()
    if not (row and row[0]):
        return 0
    row = await (await db.execute("SELECT version FROM search_schema")).fetchone()
    return int(row[0]) if row else 0


async def _upgrade(db: Connection, location: str, version: int) -> None:
    """Brings the store to `version`, one transaction per step; refuses a newer one."""
    async with db.transaction():  # as every statement of the store's (the module's doc)
        found = await _version(db)
    if found > SCHEMA_VERSION:
        raise RuntimeError(
            f"the search index {shown(location)} has schema version {found},"
            f" newer than this Tarry's {SCHEMA_VERSION}: upgrade Tarry, or rebuild the"
            " index (`tarry index rebuild`)"
        )
    for step in range(found + 1, version + 1):
        async with db.transaction():
            await db.execute("SELECT pg_advisory_xact_lock(%s)", (_UPGRADING,))
            if await _version(db) >= step:  # another process opening it took this step first
                continue
            for statement in _UPGRADES[step]:
                await db.execute(statement)
            await db.execute("UPDATE search_schema SET version = %s", (step,))
