"""A real PostgreSQL with pgvector for the suite and the bench: PGlite (Postgres compiled
to WebAssembly, with its pgvector extension) served over the Postgres wire protocol by
pglite-socket, from `scripts/pglite/serve.mjs` under Node. Debian's PostgreSQL has no
pgvector package; PGlite's npm packages do. `scripts/_pglite.sh` installs them
(`scripts/test` and `scripts/bench` source it) from `scripts/pglite/package-lock.json`,
so nothing downloads while they run.

The suite starts one server per pytest worker (`tests/conftest.py`'s `pglite`), in
memory; the search bench one of its own. PGlite is one Postgres backend and session: it
runs its clients' protocol messages one at a time, and while one client is in a
transaction, only its (`serve.mjs` says what follows); so its times are of one
WebAssembly backend, not of a Postgres server's processes."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

__all__ = ["CONNECTIONS", "missing", "pglite"]

SERVE = Path(__file__).parent.parent / "scripts" / "pglite" / "serve.mjs"
INSTALLED = SERVE.parent / "node_modules" / "@electric-sql" / "pglite-socket"
CONNECTIONS = 16
"""The clients served at once (pglite-socket refuses one more): a test's few stores, each
one connection (`tarry.search.postgres`), and the one that empties the database."""


def missing() -> str | None:
    """What is missing to start the server, if anything, and how to get it."""
    if shutil.which("node") is None:
        return "PGlite needs Node (20 or newer): apt-get install nodejs npm"
    if not INSTALLED.is_dir():
        return "PGlite is not installed: run scripts/_pglite.sh (scripts/test does)"
    return None


@asynccontextmanager
async def pglite(port: int, started_within: float) -> AsyncIterator[str]:
    """A server on `port`, once it answers (it prints `listening PORT`, in a few seconds
    on an idle machine), until the block ends: its `postgresql://` URL."""
    server = await asyncio.create_subprocess_exec(
        "node", str(SERVE), str(port), str(CONNECTIONS), stdout=asyncio.subprocess.PIPE
    )
    try:
        assert server.stdout is not None
        line = await asyncio.wait_for(server.stdout.readline(), timeout=started_within)
        if not line.startswith(b"listening"):
            raise RuntimeError(f"PGlite did not start: {line!r}")
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        if server.returncode is None:
            server.terminate()
        await server.wait()
