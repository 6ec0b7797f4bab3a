"""The stores the specs run against (`tests/test_search_store.py`,
`tests/test_memory_store.py`), each a real one: SQLite in a temporary file, and
PostgreSQL with pgvector (PGlite, this pytest worker's `pglite_url` server, emptied for
each test)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, closing, contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
import sqlite_vec  # type: ignore[import-untyped]

from tarry.contracts.search import IndexedMessage, IndexedRun, IndexRequest, SearchHit
from tarry.search import IndexStore, SearchQuery, open_store
from tarry.search.postgres import PostgresStore
from tarry.search.sqlite import SqliteStore, driver
from tarry.search.store import POSTGRES
from tests.deadline import TIMEOUT

STORES = ("sqlite", "postgres")


def location_of(request: pytest.FixtureRequest, directory: Path) -> str:
    """The location of a store of the kind `request.param` names (one of `STORES`)."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("pglite_url")
        return url
    assert request.param == "sqlite", request.param
    return str(directory / "search.db")


async def empty(location: str) -> None:
    """Makes the store at `location` empty of everything, its schema too: a PostgreSQL
    database's `public` schema, and all in it, is made anew."""
    if location.startswith(POSTGRES):
        async with await psycopg.AsyncConnection.connect(location) as db:
            await db.execute("DROP SCHEMA public CASCADE")
            await db.execute("CREATE SCHEMA public")
    else:
        await asyncio.to_thread(Path(location).unlink, missing_ok=True)


async def open_at(location: str, version: int) -> IndexStore:
    """The store at `location`, brought to `version` only (older than Tarry's)."""
    if location.startswith(POSTGRES):
        return await PostgresStore.open(location, version=version)
    return await SqliteStore.open(Path(location), version=version)


async def mark_version(location: str, version: int) -> None:
    """Writes `version` as the schema version of the store at `location`, as a newer
    Tarry would have left it."""
    if location.startswith(POSTGRES):
        async with await psycopg.AsyncConnection.connect(location) as db:
            await db.execute("UPDATE search_schema SET version = %s", (version,))
    else:
        with closing(sqlite3.connect(location)) as db:
            db.execute(f"PRAGMA user_version = {version}")


@contextmanager
def sqlite_with_vectors(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection to the SQLite store at `path` with sqlite-vec loaded, in autocommit
    mode, closed after: to write it as an older Tarry did."""
    with closing(driver().connect(str(path), isolation_level=None)) as db:
        db.enable_load_extension(True)
        sqlite_vec.load(db)
        yield db


@asynccontextmanager
async def store_of(location: str) -> AsyncIterator[IndexStore]:
    """A new, empty store at `location`, closed after."""
    await empty(location)
    store = await open_store(location)
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def dropping_proxy(url: str) -> AsyncIterator[tuple[str, Callable[[], None]]]:
    """A TCP proxy on loopback to the server of the `postgresql://` `url`: the URL
    through it, and what drops every connection it carries, as a restarted server or a
    network's idle timeout does."""
    target = urlsplit(url)
    carried: list[asyncio.StreamWriter] = []

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def carry(client: asyncio.StreamReader, to_client: asyncio.StreamWriter) -> None:
        server, to_server = await asyncio.open_connection(target.hostname, target.port)
        carried.extend((to_client, to_server))
        await asyncio.gather(pipe(client, to_server), pipe(server, to_client))

    def drop() -> None:
        for writer in carried:
            writer.transport.abort()
        carried.clear()

    proxy = await asyncio.start_server(carry, "127.0.0.1", 0)
    port = proxy.sockets[0].getsockname()[1]
    try:
        yield urlunsplit(target._replace(netloc=f"{target.username}@127.0.0.1:{port}")), drop
    finally:
        drop()
        proxy.close()
        await proxy.wait_closed()


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


async def until_found(location: Path | str, text: str, count: int = 1) -> list[SearchHit]:
    """The hits of `text` in the index at `location` (a SQLite file's path or a database's
    URL), once there are `count`: a run indexes beside what it does, so a message is found
    a moment after the run shows it."""
    store = await open_store(str(location))
    try:
        async with asyncio.timeout(TIMEOUT):
            while len(hits := await store.search(SearchQuery(text))) < count:
                await asyncio.sleep(0.05)
        return hits
    finally:
        await store.close()
