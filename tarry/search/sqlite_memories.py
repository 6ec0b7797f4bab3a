"""The SQLite store's memories (`tarry.search.memory_store`): their rows, in a table of
their own beside the index's, and the SQL that reads them back."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection
from datetime import UTC, datetime

from tarry.contracts.memories import Memory, Provenance

__all__ = ["in_scopes", "memories"]

MEMORY = (
    "SELECT m.id, m.text, m.tags, m.scope, m.run_id, m.turn, m.approved_by, m.created,"
    " m.edited, m.edited_by, m.deleted, m.deleted_by FROM memories m"
)


def in_scopes(scopes: Collection[str] | None, *, deleted: bool = False) -> tuple[str, list[object]]:
    """The WHERE clause that keeps the memories of `scopes` (None: all), and its values."""
    clauses = [] if deleted else ["m.deleted IS NULL"]
    names = sorted(scopes) if scopes is not None else None
    if names is not None:
        clauses.append(f"m.scope IN ({', '.join('?' * len(names)) or 'NULL'})")
    return (f" WHERE {' AND '.join(clauses)}" if clauses else ""), list(names or ())


def memories(db: sqlite3.Connection, rest: str, args: list[object]) -> list[Memory]:
    """The memories `MEMORY` + `rest` selects, as the store's answers."""
    return [_memory(*row) for row in db.execute(MEMORY + rest, args)]


def _memory(
    id: str,
    text: str,
    tags: str,
    scope: str,
    run_id: str | None,
    turn: int | None,
    approved_by: str | None,
    created: float,
    edited: float | None,
    edited_by: str | None,
    deleted: float | None,
    deleted_by: str | None,
) -> Memory:
    def moment(at: float | None) -> datetime | None:
        return None if at is None else datetime.fromtimestamp(at, UTC)

    return Memory(
        id=id,
        text=text,
        tags=json.loads(tags),
        scope=scope,
        provenance=Provenance(run_id=run_id, turn=turn, approved_by=approved_by),
        created=datetime.fromtimestamp(created, UTC),
        edited=moment(edited),
        edited_by=edited_by,
        deleted=moment(deleted),
        deleted_by=deleted_by,
    )
