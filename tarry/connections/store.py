"""The connections store: each person's grants to each OAuth server, and the connect
flows under way, in one SQLite file every process of a deployment shares (the worker
reads and refreshes grants, the API writes them at the callback and revokes them).

SQLite rather than the payload store: a grant changes (a refresh, a revocation) and a
flow's state must be taken once, atomically; the payload store keeps immutable blobs by
their hash. Every secret (tokens, client secrets, PKCE verifiers) is encrypted with the
deployment's Fernet key before it is written: the file alone gives none of them away.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from cryptography.fernet import Fernet, InvalidToken

from tarry.contracts import ErrorCode
from tarry.core.errors import TarryError

__all__ = ["Connection", "ConnectionStore", "Grant", "PendingConnect"]

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS grants (
    person TEXT NOT NULL, server TEXT NOT NULL, secret BLOB NOT NULL,
    connected_at REAL NOT NULL, refreshed_at REAL, scope TEXT,
    PRIMARY KEY (person, server));
CREATE TABLE IF NOT EXISTS pending (
    state TEXT PRIMARY KEY, person TEXT NOT NULL, server TEXT NOT NULL,
    run_id TEXT NOT NULL, secret BLOB NOT NULL, expires_at REAL NOT NULL);
"""


@dataclass(frozen=True)
class Grant:
    """A person's grant to one server: what the worker sends (`access_token`) and what
    keeps it alive (`refresh_token`, at `token_endpoint`, as `client_id`)."""

    access_token: str
    token_endpoint: str
    client_id: str
    client_secret: str | None = None
    refresh_token: str | None = None
    expires_at: float | None = None
    """Unix seconds; None: the server did not say."""
    scope: str | None = None

    def expired(self, margin: float = 30.0) -> bool:
        return self.expires_at is not None and time.time() + margin >= self.expires_at

    def __repr__(self) -> str:  # a grant in a log or a traceback shows no secret
        return f"Grant(client_id={self.client_id!r}, expires_at={self.expires_at!r})"


@dataclass(frozen=True)
class PendingConnect:
    """A connect flow under way, bound to the person and the run that asked for it."""

    person: str
    server: str
    run_id: str
    verifier: str
    redirect_uri: str
    token_endpoint: str
    client_id: str
    client_secret: str | None

    def __repr__(self) -> str:
        return f"PendingConnect(person={self.person!r}, server={self.server!r})"


@dataclass(frozen=True)
class Connection:
    """What a person sees of a grant: the server, what it allows and when it was made
    and last refreshed, never a token."""

    person: str
    server: str
    connected_at: float
    refreshed_at: float | None
    """None: never refreshed since the person connected."""
    scope: str | None
    """The scopes the authorization server granted, space-separated; None: it did not say."""


class ConnectionStore:
    """The store in one SQLite file, its secrets sealed with `key` (a Fernet key)."""

    def __init__(self, path: Path, key: str) -> None:
        try:
            self._fernet = Fernet(key.encode())
        except (ValueError, TypeError) as e:
            raise TarryError(
                ErrorCode.CONNECTIONS_UNAVAILABLE,
                "TARRY_CONNECTIONS_KEY is no Fernet key: make one with"
                " `python -c 'from cryptography.fernet import Fernet;"
                " print(Fernet.generate_key().decode())'`",
            ) from e
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(_SCHEMA)
        self._lock = asyncio.Lock()

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        async with self._lock:
            return await asyncio.to_thread(work, self._db)

    def _seal(self, value: dict[str, Any]) -> bytes:
        return self._fernet.encrypt(json.dumps(value).encode())

    def _open(self, secret: bytes) -> dict[str, Any]:
        try:
            opened: dict[str, Any] = json.loads(self._fernet.decrypt(secret))
        except InvalidToken as e:
            raise TarryError(
                ErrorCode.CONNECTIONS_UNAVAILABLE,
                "a stored connection was sealed with another TARRY_CONNECTIONS_KEY: give"
                " every process of the deployment the same key",
            ) from e
        return opened

    async def grant(self, person: str, server: str) -> Grant | None:
        """The person's grant to `server`; None when they have none (or it was revoked)."""
        rows = await self._run(
            lambda db: db.execute(
                "SELECT secret FROM grants WHERE person = ? AND server = ?", (person, server)
            ).fetchall()
        )
        return Grant(**self._open(rows[0][0])) if rows else None

    async def save(self, person: str, server: str, grant: Grant) -> None:
        """Stores the grant a person just made (a connect), in place of any before it."""
        secret = self._seal(grant.__dict__)
        await self._run(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO grants VALUES (?, ?, ?, ?, NULL, ?)",
                (person, server, secret, time.time(), grant.scope),
            )
        )

    async def refreshed(self, person: str, server: str, old: Grant, new: Grant) -> bool:
        """Stores `new` in place of `old` unless the grant changed meanwhile (revoked, or
        refreshed by another process): whether it was stored. The connection keeps when
        it was made, and says when it was refreshed."""
        current = await self.grant(person, server)
        if current is None or current.access_token != old.access_token:
            return False
        secret = self._seal(new.__dict__)
        await self._run(
            lambda db: db.execute(
                "UPDATE grants SET secret = ?, refreshed_at = ?, scope = ?"
                " WHERE person = ? AND server = ?",
                (secret, time.time(), new.scope or old.scope, person, server),
            )
        )
        return True

    async def revoke(self, person: str, server: str) -> bool:
        """Forgets the grant; whether there was one."""
        count = await self._run(
            lambda db: (
                db.execute(
                    "DELETE FROM grants WHERE person = ? AND server = ?", (person, server)
                ).rowcount
            )
        )
        return bool(count)

    async def connections(self, person: str | None = None) -> list[Connection]:
        """The grants of `person` (everyone's: None), by person and server."""
        where, args = ("WHERE person = ?", (person,)) if person is not None else ("", ())
        rows = await self._run(
            lambda db: db.execute(
                "SELECT person, server, connected_at, refreshed_at, scope FROM grants"
                f" {where} ORDER BY person, server",
                args,
            ).fetchall()
        )
        return [Connection(*row) for row in rows]

    async def begin(self, state: str, pending: PendingConnect, ttl: float) -> None:
        """Records a connect flow under its `state`, good for `ttl` seconds."""
        secret = self._seal(pending.__dict__)
        row = (state, pending.person, pending.server, pending.run_id, secret, time.time() + ttl)
        await self._run(lambda db: db.execute("INSERT INTO pending VALUES (?, ?, ?, ?, ?, ?)", row))

    async def take(self, state: str) -> PendingConnect | None:
        """The flow of `state`, once: taken, it is gone; None when unknown or expired."""

        def take(db: sqlite3.Connection) -> tuple[bytes, float] | None:
            db.execute("DELETE FROM pending WHERE expires_at < ?", (time.time(),))
            row = db.execute(
                "DELETE FROM pending WHERE state = ? RETURNING secret, expires_at", (state,)
            ).fetchone()
            return None if row is None else (row[0], row[1])

        taken = await self._run(take)
        return None if taken is None else PendingConnect(**self._open(taken[0]))

    def close(self) -> None:
        self._db.close()
