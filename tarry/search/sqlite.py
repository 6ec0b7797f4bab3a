"""The embedded store: one SQLite file under the data directory, its words in FTS5: the
index of the runs' messages, its embeddings, when it is given some (their floats in a
table, and a copy of one bit a dimension in a `vec0` table of `sqlite-vec`, searched
first), and the memories, in tables of their own.

SQLite's calls block, so each runs in a thread, one at a time (`_lock`): a worker's
index activities and a server's searches share one connection. Writes are one
transaction per request, in WAL mode, so a reader never waits for a writer and a
worker killed mid-request leaves the index as it was before it.

`sqlite-vec` is a loadable extension, and some Pythons' `sqlite3` cannot load one (pyenv's
and python.org's builds leave it out): there the store uses `pysqlite3`'s, a `sqlite3` of
its own that can. Without either, the store keeps words alone, and vectors are refused
with what to install.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import struct
import threading
import time
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import TypeVar, cast

from tarry.contracts.memories import Memory, NewMemory
from tarry.contracts.search import IndexRequest, SearchHit
from tarry.search.sqlite_memories import in_scopes, memories
from tarry.search.store import (
    SCHEMA_VERSION,
    DimensionMismatch,
    IndexStore,
    SearchQuery,
    Vector,
    fuse,
    fused,
    opening,
    words_of,
)

__all__ = ["SqliteStore", "driver"]

_BUSY_WAIT_MS = 5000
"""How long a connection waits for another's lock before it gives up."""

T = TypeVar("T")

Step = str | Callable[[sqlite3.Connection], None]
"""A statement of an upgrade, or a function of the connection for one SQL cannot say."""


def _vectors_in_two_forms(db: sqlite3.Connection) -> None:
    """Step 4: the vectors the store holds (in `messages_vec`, `vec0` floats) move to a
    plain table (`message_vectors`, read by id to re-rank) and a bit-a-dimension copy
    (`messages_bits`, scanned first); a store with none makes the second with its first."""
    db.execute("CREATE TABLE message_vectors (id INTEGER PRIMARY KEY, embedding BLOB NOT NULL)")
    if (dimensions := _dimensions(db)) is None:
        return
    try:
        db.execute("INSERT INTO message_vectors SELECT rowid, embedding FROM messages_vec")
        db.execute(_BITS_TABLE.format(bits=_bits_of(dimensions)))
        for rowid, floats in db.execute("SELECT id, embedding FROM message_vectors").fetchall():
            db.execute(_INSERT_BITS, (rowid, _padded(floats)))
        db.execute("DROP TABLE messages_vec")
    except Exception as e:  # the driver's OperationalError: no vec0, no vec_quantize_binary
        raise RuntimeError(
            f"the search index holds vectors, and upgrading it needs sqlite-vec ({e}):"
            " install the sqlite-vec package, and pysqlite3-binary where Python's sqlite3"
            " cannot load extensions"
        ) from None


_UPGRADES: dict[int, tuple[Step, ...]] = {
    1: (
        "CREATE TABLE runs (run_id TEXT PRIMARY KEY, owner TEXT, agent TEXT)",
        "CREATE TABLE run_readers (run_id TEXT NOT NULL, name TEXT NOT NULL,"
        " PRIMARY KEY (run_id, name))",
        "CREATE INDEX run_readers_by_name ON run_readers (name)",
        "CREATE TABLE messages (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL,"
        " idx INTEGER NOT NULL, role TEXT NOT NULL, text TEXT NOT NULL, at REAL NOT NULL,"
        " UNIQUE (run_id, idx))",
        "CREATE VIRTUAL TABLE messages_fts USING fts5(text, content='messages',"
        " content_rowid='id', tokenize='unicode61')",
        "CREATE TRIGGER messages_indexed AFTER INSERT ON messages BEGIN"
        " INSERT INTO messages_fts (rowid, text) VALUES (new.id, new.text); END",
        "CREATE TRIGGER messages_forgotten AFTER DELETE ON messages BEGIN"
        " INSERT INTO messages_fts (messages_fts, rowid, text)"
        " VALUES ('delete', old.id, old.text); END",
    ),
    2: (
        "CREATE TABLE memories (n INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE,"
        " text TEXT NOT NULL, tags TEXT NOT NULL, scope TEXT NOT NULL, run_id TEXT,"
        " turn INTEGER, approved_by TEXT, created REAL NOT NULL, edited REAL,"
        " edited_by TEXT, deleted REAL, deleted_by TEXT)",
        "CREATE INDEX memories_by_scope ON memories (scope, created)",
        "CREATE VIRTUAL TABLE memories_fts USING fts5(text, tags, tokenize='unicode61')",
        "CREATE TRIGGER memory_kept AFTER INSERT ON memories BEGIN"
        " INSERT INTO memories_fts (rowid, text, tags) VALUES (new.n, new.text, new.tags); END",
        # A deleted memory leaves the words, so no recall can find it.
        "CREATE TRIGGER memory_changed AFTER UPDATE ON memories BEGIN"
        " DELETE FROM memories_fts WHERE rowid = old.n;"
        " INSERT INTO memories_fts (rowid, text, tags) SELECT new.n, new.text, new.tags"
        " WHERE new.deleted IS NULL; END",
    ),
    # The length of the store's vectors; their `vec0` table is made with the first.
    3: ("CREATE TABLE settings (name TEXT PRIMARY KEY, value TEXT NOT NULL)",),
    4: (_vectors_in_two_forms,),
    # The memories' embeddings: each its own length, read by recall alone (few a scope).
    5: ("ALTER TABLE memories ADD COLUMN embedding BLOB",),
}
"""The statements that bring a store of version N-1 to N; version 0 is an empty file."""

NEAREST = 4096
"""The most nearest neighbours one `vec0` query asks for (sqlite-vec's own bound)."""

OVERSAMPLE = 5
"""Candidates the bit pass finds per hit a search asks for, re-ranked by their floats:
sqlite-vec's time grows with `k` as much as with the vectors it scans, so few."""

_BITS_TABLE = "CREATE VIRTUAL TABLE messages_bits USING vec0(embedding bit[{bits}])"
_INSERT_BITS = "INSERT INTO messages_bits (rowid, embedding) VALUES (?, vec_quantize_binary(?))"


def driver() -> ModuleType:
    """The `sqlite3` to connect with: the standard library's where it loads extensions,
    else `pysqlite3`'s where it is installed."""
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        return sqlite3
    try:
        from pysqlite3 import dbapi2  # type: ignore[import-untyped]
    except ImportError:
        return sqlite3
    return cast(ModuleType, dbapi2)


def _vectors_problem(db: sqlite3.Connection) -> str | None:
    """Loads `sqlite-vec` into `db`; what keeps it from loading, None when it did."""
    try:
        import sqlite_vec  # type: ignore[import-untyped]

        db.enable_load_extension(True)
        sqlite_vec.load(db)
        db.enable_load_extension(False)
    except Exception as e:  # not installed, no loading here, a build for another machine
        return (
            f"semantic search needs sqlite-vec loaded into SQLite ({type(e).__name__}: {e}):"
            " install the sqlite-vec package, and pysqlite3-binary where Python's sqlite3"
            " cannot load extensions"
        )
    return None


def _blob(vector: Vector) -> bytes:
    return struct.pack(f"{len(vector)}f", *vector)


def _bits_of(dimensions: int) -> int:
    """The length of the bit copy of vectors of `dimensions`: a whole number of bytes."""
    return -(-dimensions // 8) * 8


def _padded(floats: bytes) -> bytes:
    """A vector's floats with zeros to a whole number of bytes of bits, as
    `vec_quantize_binary` takes them (a zero is a 0 bit, so the padding never differs)."""
    dimensions = len(floats) // 4
    return floats + bytes(4 * (_bits_of(dimensions) - dimensions))


class SqliteStore(IndexStore):
    def __init__(self, connection: sqlite3.Connection, vectors_problem: str | None) -> None:
        self._db = connection
        self._lock = threading.Lock()
        self._vectors_problem = vectors_problem

    @classmethod
    async def open(cls, path: Path, *, version: int = SCHEMA_VERSION) -> SqliteStore:
        """The store in `path`, brought to `version` (a test may ask for an older one)."""

        def connect() -> SqliteStore:
            path.parent.mkdir(parents=True, exist_ok=True)
            sqlite = driver()
            db: sqlite3.Connection = sqlite.connect(
                str(path), check_same_thread=False, isolation_level=None
            )
            db.execute(f"PRAGMA busy_timeout={_BUSY_WAIT_MS}")
            _into_wal(db, sqlite.OperationalError)
            db.execute("PRAGMA synchronous=NORMAL")
            problem = _vectors_problem(db)  # before the upgrade: step 4 needs sqlite-vec
            _upgrade(db, path, version)
            return cls(db, problem)

        return await asyncio.to_thread(connect)

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        def locked() -> T:
            with self._lock:
                return work(self._db)

        return await asyncio.to_thread(locked)

    async def index(self, request: IndexRequest, vectors: Sequence[Vector] | None = None) -> int:
        run = request.run
        if vectors is not None:
            if self._vectors_problem is not None:
                raise RuntimeError(self._vectors_problem)
            if len(vectors) != len(request.messages):
                raise ValueError(
                    f"{len(vectors)} vectors for {len(request.messages)} messages: one each"
                )

        def write(db: sqlite3.Connection) -> int:
            with _transaction(db):
                db.execute(
                    "INSERT INTO runs (run_id, owner, agent) VALUES (?, ?, ?)"
                    " ON CONFLICT (run_id) DO NOTHING",
                    (run.run_id, run.owner, run.agent),
                )
                db.executemany(
                    "INSERT INTO run_readers (run_id, name) VALUES (?, ?) ON CONFLICT DO NOTHING",
                    [(run.run_id, name) for name in run.readers],
                )
                rows = [
                    (run.run_id, m.index, m.role, m.text, m.at.timestamp())
                    for m in request.messages
                ]
                if vectors is None:
                    written = db.executemany(_INSERT_MESSAGE, rows)
                    return max(written.rowcount, 0)
                _fix_dimensions(db, {len(v) for v in vectors})
                new = 0
                for row, vector in zip(rows, vectors, strict=True):
                    # A message indexed before keeps its vector: RETURNING names new rows only.
                    for (rowid,) in db.execute(f"{_INSERT_MESSAGE} RETURNING id", row).fetchall():
                        floats = _blob(vector)
                        db.execute(
                            "INSERT INTO message_vectors (id, embedding) VALUES (?, ?)",
                            (rowid, floats),
                        )
                        db.execute(_INSERT_BITS, (rowid, _padded(floats)))
                        new += 1
                return new

        return await self._run(write)

    async def search(self, query: SearchQuery) -> list[SearchHit]:
        words = words_of(query.text)
        if not words:
            return []
        match = " ".join(f'"{w}"' for w in words)
        where, args = _filters(query)

        def read(db: sqlite3.Connection) -> list[SearchHit]:
            lexical = _lexical(db, match, where, args, query.limit)
            if query.embedding is None or (dimensions := _dimensions(db)) is None:
                return lexical
            if self._vectors_problem is not None:  # vectors another machine wrote
                raise RuntimeError(self._vectors_problem)
            if len(query.embedding) != dimensions:
                raise DimensionMismatch(
                    f"the query's embedding has {len(query.embedding)} dimensions, the"
                    f" index's vectors {dimensions}: the embedding profile changed since"
                    " they were made; `tarry index rebuild` makes them anew"
                )
            semantic = _semantic(db, _blob(query.embedding), where, args, query.limit)
            return fused([lexical, semantic], query.limit)

        return await self._run(read)

    async def dimensions(self) -> int | None:
        return await self._run(_dimensions)

    async def count(self) -> int:
        return await self._run(lambda db: _count(db, "messages"))

    async def clear(self) -> None:
        def clear(db: sqlite3.Connection) -> None:
            with _transaction(db):
                for table in ("message_vectors", "messages", "run_readers", "runs", "settings"):
                    db.execute(f"DELETE FROM {table}")
                db.execute("DROP TABLE IF EXISTS messages_bits")

        await self._run(clear)

    async def remember(self, memory: NewMemory, vector: Vector | None = None) -> Memory:
        source = memory.provenance

        def write(db: sqlite3.Connection) -> Memory:
            with _transaction(db):
                db.execute(
                    "INSERT INTO memories (id, text, tags, scope, run_id, turn, approved_by,"
                    " created, embedding) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (id) DO NOTHING",
                    (
                        memory.id,
                        memory.text,
                        json.dumps(memory.tags),
                        memory.scope,
                        source.run_id,
                        source.turn,
                        source.approved_by,
                        datetime.now(UTC).timestamp(),
                        None if vector is None else _blob(vector),
                    ),
                )
                return memories(db, " WHERE m.id = ?", [memory.id])[0]

        return await self._run(write)

    async def recall(
        self,
        query: str,
        scopes: Collection[str] | None,
        limit: int = 10,
        embedding: Vector | None = None,
    ) -> list[Memory]:
        words = words_of(query)
        where, args = in_scopes(scopes)
        if not words:
            return await self._run(
                lambda db: memories(
                    db, f"{where} ORDER BY m.created DESC, m.n DESC LIMIT ?", [*args, limit]
                )
            )
        # Any word, best first: a question's other words ("who", "the") need not be in it.
        sql = (
            f" JOIN memories_fts ON memories_fts.rowid = m.n{where}"
            " AND memories_fts MATCH ? ORDER BY memories_fts.rank LIMIT ?"
        )
        matched = " OR ".join(f'"{w}"' for w in words)
        if embedding is None:
            return await self._run(lambda db: memories(db, sql, [*args, matched, limit]))
        if self._vectors_problem is not None:
            raise RuntimeError(self._vectors_problem)
        floats = _blob(embedding)
        near = (
            f"{where} AND length(m.embedding) = ?"
            " ORDER BY vec_distance_cosine(m.embedding, ?), m.n DESC LIMIT ?"
        )

        def read(db: sqlite3.Connection) -> list[Memory]:
            lexical = memories(db, sql, [*args, matched, limit])
            semantic = memories(db, near, [*args, len(floats), floats, limit])
            return [m for m, _ in fuse([lexical, semantic], lambda m: m.id, limit)]

        return await self._run(read)

    async def get(self, memory_id: str) -> Memory | None:
        found = await self._run(lambda db: memories(db, " WHERE m.id = ?", [memory_id]))
        return found[0] if found else None

    async def list_memories(
        self, scopes: Collection[str] | None, limit: int = 100, *, deleted: bool = False
    ) -> list[Memory]:
        where, args = in_scopes(scopes, deleted=deleted)
        return await self._run(
            lambda db: memories(
                db, f"{where} ORDER BY m.created DESC, m.n DESC LIMIT ?", [*args, limit]
            )
        )

    async def edit(
        self,
        memory_id: str,
        by: str,
        *,
        text: str | None = None,
        tags: list[str] | None = None,
        vector: Vector | None = None,
    ) -> Memory | None:
        def write(db: sqlite3.Connection) -> Memory | None:
            with _transaction(db):
                db.execute(
                    "UPDATE memories SET text = coalesce(?, text), tags = coalesce(?, tags),"
                    " embedding = iif(?, ?, embedding), edited = ?, edited_by = ?"
                    " WHERE id = ? AND deleted IS NULL",
                    (
                        text,
                        None if tags is None else json.dumps(tags),
                        text is not None,  # a new text: its vector, or none
                        None if vector is None else _blob(vector),
                        datetime.now(UTC).timestamp(),
                        by,
                        memory_id,
                    ),
                )
                found = memories(db, " WHERE m.id = ? AND m.deleted IS NULL", [memory_id])
                return found[0] if found else None

        return await self._run(write)

    async def forget(self, memory_id: str, by: str) -> Memory | None:
        def write(db: sqlite3.Connection) -> Memory | None:
            with _transaction(db):
                db.execute(
                    "UPDATE memories SET deleted = ?, deleted_by = ?"
                    " WHERE id = ? AND deleted IS NULL",
                    (datetime.now(UTC).timestamp(), by, memory_id),
                )
                found = memories(db, " WHERE m.id = ?", [memory_id])
                return found[0] if found else None

        return await self._run(write)

    async def schema_version(self) -> int:
        return await self._run(_version)

    async def close(self) -> None:
        await self._run(lambda db: db.close())


_INSERT_MESSAGE = (
    "INSERT INTO messages (run_id, idx, role, text, at) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (run_id, idx) DO NOTHING"
)
_HIT = "m.run_id, m.idx, m.role, m.at, r.agent"


def _filters(query: SearchQuery) -> tuple[str, list[object]]:
    """The conditions on a message `m` of a run `r` that `query` keeps, and their values."""
    sql: list[str] = []
    args: list[object] = []
    if query.since is not None:
        sql.append(" AND m.at >= ?")
        args.append(query.since.timestamp())
    if query.agent is not None:
        sql.append(" AND r.agent = ?")
        args.append(query.agent)
    if (readable := query.readable) is not None:
        names = sorted(readable.names)
        sql.append(
            " AND (r.owner = ? OR EXISTS (SELECT 1 FROM run_readers n WHERE"
            f" n.run_id = m.run_id AND n.name IN ({', '.join('?' * len(names)) or 'NULL'})))"
        )
        args += [readable.user, *names]
    return "".join(sql), args


def _hit(row: tuple[str, int, str, float, str | None], score: float, snippet: str) -> SearchHit:
    run_id, index, role, at, agent = row
    at_utc = datetime.fromtimestamp(at, UTC)
    return SearchHit(
        run_id=run_id, index=index, role=role, at=at_utc, agent=agent, score=score, snippet=snippet
    )


def _lexical(
    db: sqlite3.Connection, match: str, where: str, args: list[object], limit: int
) -> list[SearchHit]:
    """The messages with every word of `match`, by FTS5's rank."""
    rows = db.execute(
        f"SELECT {_HIT}, -messages_fts.rank, m.id FROM messages_fts"
        " JOIN messages m ON m.id = messages_fts.rowid JOIN runs r ON r.run_id = m.run_id"
        f" WHERE messages_fts MATCH ?{where} ORDER BY messages_fts.rank LIMIT ?",
        [match, *args, limit],
    ).fetchall()
    # The snippets of the best rows only: made in the query above, one would be made for
    # every row that matched, before the sort: most of a common word's time.
    ids = [row[-1] for row in rows]
    snippets = dict(
        db.execute(
            "SELECT rowid, snippet(messages_fts, 0, '[', ']', '…', 16) FROM messages_fts"
            f" WHERE messages_fts MATCH ? AND rowid IN ({', '.join('?' * len(ids))})",
            [match, *ids],
        )
    )
    return [_hit(row[:5], row[5], snippets[row[6]]) for row in rows]


def _semantic(
    db: sqlite3.Connection, embedding: bytes, where: str, args: list[object], limit: int
) -> list[SearchHit]:
    """The `limit` messages nearest `embedding` by cosine distance that the filters keep:
    the bit copies nearest it by Hamming distance first (`OVERSAMPLE` a hit: a scan of
    one bit a dimension, a 32nd of the floats), re-ranked by their floats; or, when the
    filters leave too few of those and there are more, every message they keep."""
    near = min(NEAREST, limit * OVERSAMPLE)
    # MATERIALIZED: else SQLite moves the filters into the KNN query, which sqlite-vec
    # refuses.
    rows = db.execute(
        "WITH near AS MATERIALIZED (SELECT rowid FROM messages_bits"
        f" WHERE embedding MATCH vec_quantize_binary(?) AND k = {near})"
        f" SELECT {_HIT}, vec_distance_cosine(v.embedding, ?) AS apart, m.text FROM near"
        " JOIN message_vectors v ON v.id = near.rowid JOIN messages m ON m.id = near.rowid"
        f" JOIN runs r ON r.run_id = m.run_id WHERE apart IS NOT NULL{where}"
        " ORDER BY apart LIMIT ?",
        [_padded(embedding), embedding, *args, limit],
    ).fetchall()
    # Counted in vec0's own table of rowids: `count(*)` of a table of vectors reads them.
    if len(rows) < limit and _count(db, "messages_bits_rowids") > near:
        # The kept messages first, then their vectors (CROSS JOIN keeps that order):
        # SQLite would otherwise read every vector and filter after.
        rows = db.execute(
            "WITH kept AS MATERIALIZED (SELECT m.id FROM messages m"
            f" JOIN runs r ON r.run_id = m.run_id WHERE 1{where})"
            f" SELECT {_HIT}, vec_distance_cosine(v.embedding, ?) AS apart, m.text"
            " FROM kept CROSS JOIN message_vectors v ON v.id = kept.id"
            " JOIN messages m ON m.id = kept.id JOIN runs r ON r.run_id = m.run_id"
            " WHERE apart IS NOT NULL ORDER BY apart LIMIT ?",
            [*args, embedding, limit],
        ).fetchall()
    return [_hit(row[:5], 1.0 - row[5], opening(row[6])) for row in rows]


def _count(db: sqlite3.Connection, table: str) -> int:
    return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def _dimensions(db: sqlite3.Connection) -> int | None:
    found = db.execute("SELECT value FROM settings WHERE name = 'dimensions'").fetchone()
    return int(found[0]) if found else None


def _fix_dimensions(db: sqlite3.Connection, lengths: set[int]) -> None:
    """Checks that vectors of `lengths` fit the store, fixing its dimensions with the first
    (and making their `vec0` table); `DimensionMismatch` for any other length."""
    dimensions = _dimensions(db)
    if dimensions is None and len(lengths) == 1:
        [dimensions] = lengths
        db.execute("INSERT INTO settings (name, value) VALUES ('dimensions', ?)", (dimensions,))
        db.execute(_BITS_TABLE.format(bits=_bits_of(dimensions)))
    if lengths - {dimensions}:
        raise DimensionMismatch(
            f"vectors of {sorted(lengths)} dimensions for an index of {dimensions}: the"
            " embedding profile changed since it was filled; `tarry index rebuild` makes"
            " every vector anew"
        )


class _transaction:
    """`BEGIN IMMEDIATE` ... `COMMIT`, or `ROLLBACK` on an error (the connection is in
    autocommit mode, so each request is exactly one transaction)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, *_: object) -> None:
        self._db.execute("ROLLBACK" if kind is not None else "COMMIT")


def _version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def _into_wal(db: sqlite3.Connection, locked: type[Exception]) -> None:
    """Puts the file in WAL mode. Two processes opening a new file at once can meet here,
    and SQLite answers "database is locked" to the second at once, without its busy
    handler: it asks again for as long as the busy timeout lasts."""
    for _ in range(_BUSY_WAIT_MS // 50):
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except locked as e:  # the driver's OperationalError
            if "locked" not in str(e):
                raise
            time.sleep(0.05)
    db.execute("PRAGMA journal_mode=WAL")


def _upgrade(db: sqlite3.Connection, path: Path, version: int) -> None:
    """Brings the store to `version`, one transaction per step; refuses a newer one."""
    found = _version(db)
    if found > SCHEMA_VERSION:
        raise RuntimeError(
            f"the search index {path} has schema version {found}, newer than this Tarry's"
            f" {SCHEMA_VERSION}: upgrade Tarry, or rebuild the index (`tarry index rebuild`)"
        )
    for step in range(found + 1, version + 1):
        with _transaction(db):
            if _version(db) >= step:  # another process opening it took this step first
                continue
            for statement in _UPGRADES[step]:
                if callable(statement):
                    statement(db)
                else:
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {step}")
