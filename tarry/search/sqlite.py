"""The embedded store: one SQLite file under the data directory, its words in FTS5.

SQLite's calls block, so each runs in a thread, one at a time (`_lock`): a worker's
index activities and a server's searches share one connection. Writes are one
transaction per request, in WAL mode, so a reader never waits for a writer and a
worker killed mid-request leaves the index as it was before it.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from tarry.contracts.search import IndexRequest, SearchHit
from tarry.search.store import SCHEMA_VERSION, SearchQuery, SearchStore, Vector, words_of

__all__ = ["SqliteStore"]

T = TypeVar("T")

_UPGRADES: dict[int, tuple[str, ...]] = {
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
}
"""The statements that bring a store of version N-1 to N; version 0 is an empty file."""


class SqliteStore(SearchStore):
    def __init__(self, connection: sqlite3.Connection) -> None:
        self._db = connection
        self._lock = threading.Lock()

    @classmethod
    async def open(cls, path: Path, *, version: int = SCHEMA_VERSION) -> SqliteStore:
        """The store in `path`, brought to `version` (a test may ask for an older one)."""

        def connect() -> sqlite3.Connection:
            path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA busy_timeout=5000")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            _upgrade(db, path, version)
            return db

        return cls(await asyncio.to_thread(connect))

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        def locked() -> T:
            with self._lock:
                return work(self._db)

        return await asyncio.to_thread(locked)

    async def index(self, request: IndexRequest, vectors: Sequence[Vector] | None = None) -> int:
        # Vectors are kept from the next commit on (sqlite-vec); until then words alone.
        run = request.run

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
                written = db.executemany(
                    "INSERT INTO messages (run_id, idx, role, text, at) VALUES (?, ?, ?, ?, ?)"
                    " ON CONFLICT (run_id, idx) DO NOTHING",
                    [
                        (run.run_id, m.index, m.role, m.text, m.at.timestamp())
                        for m in request.messages
                    ],
                )
                return max(written.rowcount, 0)

        return await self._run(write)

    async def search(self, query: SearchQuery) -> list[SearchHit]:
        words = words_of(query.text)
        if not words:
            return []
        sql = [
            "SELECT m.run_id, m.idx, m.role, m.at, r.agent, -messages_fts.rank, m.id",
            " FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid",
            " JOIN runs r ON r.run_id = m.run_id WHERE messages_fts MATCH ?",
        ]
        args: list[object] = [" ".join(f'"{w}"' for w in words)]
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
        sql.append(" ORDER BY messages_fts.rank LIMIT ?")
        args.append(query.limit)

        def read(db: sqlite3.Connection) -> list[SearchHit]:
            rows = db.execute("".join(sql), args).fetchall()
            # The snippets of the best rows only: made in the query above, one would be
            # made for every row that matched, before the sort: most of a common word's time.
            ids = [row[-1] for row in rows]
            snippets = dict(
                db.execute(
                    "SELECT rowid, snippet(messages_fts, 0, '[', ']', '…', 16) FROM messages_fts"
                    f" WHERE messages_fts MATCH ? AND rowid IN ({', '.join('?' * len(ids))})",
                    [args[0], *ids],
                )
            )
            return [
                SearchHit(
                    run_id=run_id,
                    index=index,
                    role=role,
                    at=datetime.fromtimestamp(at, UTC),
                    agent=agent,
                    score=score,
                    snippet=snippets[rowid],
                )
                for run_id, index, role, at, agent, score, rowid in rows
            ]

        return await self._run(read)

    async def dimensions(self) -> int | None:
        return None

    async def count(self) -> int:
        return await self._run(
            lambda db: int(db.execute("SELECT count(*) FROM messages").fetchone()[0])
        )

    async def clear(self) -> None:
        def clear(db: sqlite3.Connection) -> None:
            with _transaction(db):
                for table in ("messages", "run_readers", "runs"):
                    db.execute(f"DELETE FROM {table}")

        await self._run(clear)

    async def schema_version(self) -> int:
        return await self._run(_version)

    async def close(self) -> None:
        await self._run(lambda db: db.close())


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
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {step}")
