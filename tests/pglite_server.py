"""A real PostgreSQL with pgvector for the suite: PGlite (Postgres compiled to
WebAssembly, with its pgvector extension) served over the Postgres wire protocol by
pglite-socket, from `tests/pglite/serve.mjs` under Node. Debian's PostgreSQL has no
pgvector package; PGlite's npm packages do. `scripts/_pglite.sh` installs them
(`scripts/test` sources it), from `tests/pglite/package-lock.json`, so nothing
downloads while the tests run.

Each pytest worker starts one server (`tests/conftest.py`'s `pglite`), in memory, and
each test that uses it starts from an empty database (`fresh_database`)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import psycopg

from tests.deadline import deadline

SERVE = Path(__file__).parent / "pglite" / "serve.mjs"
INSTALLED = SERVE.parent / "node_modules" / "@electric-sql" / "pglite-socket"
CONNECTIONS = 16
"""The clients served at once (pglite-socket refuses one more): a test's few stores, each
one connection (`tarry.search.postgres`), and the one that empties the database."""


def missing() -> str | None:
    """What is missing to start the server, if anything."""
    if shutil.which("node") is None:
        return "the PostgreSQL tests need Node (20 or newer) for PGlite"
    if not INSTALLED.is_dir():
        return "the PostgreSQL tests need PGlite: run scripts/_pglite.sh (scripts/test does)"
    return None


async def start_pglite(port: int) -> asyncio.subprocess.Process:
    """The server on `port`, once it answers (it prints `listening PORT`)."""
    server = await asyncio.create_subprocess_exec(
        "node", str(SERVE), str(port), str(CONNECTIONS), stdout=asyncio.subprocess.PIPE
    )
    assert server.stdout is not None
    line = await asyncio.wait_for(server.stdout.readline(), timeout=deadline(60))
    assert line.startswith(b"listening"), line
    return server


async def fresh_database(url: str) -> None:
    """Empties the database at `url`: its `public` schema, and all in it, made anew."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as db:
        await db.execute("DROP SCHEMA public CASCADE")
        await db.execute("CREATE SCHEMA public")
