"""Search across runs: an index of every run's messages, lexical always, and the one
interface (`SearchStore`) its stores keep: SQLite with FTS5 under the data directory
(`sqlite.py`), for `tarry dev` and one machine; PostgreSQL with its own full-text search
and pgvector (`postgres.py`, the `postgres` extra), for a team. `open_store` picks one by
location. With an embedding profile, the messages' embeddings too, and search is hybrid:
by words and by meaning, fused by rank (`fused`). The same store keeps the agents'
memories (`MemoryStore`, `memory_store.py`): together, an `IndexStore`.

The index is never the only copy of anything: it holds what the runs' histories and
transcript pages hold, written as messages are written (the `index_messages` activity,
idempotent by message id: a run and a transcript index) and rebuilt from them (`tarry
index rebuild`). Results follow ownership and shares as runs do: each run's owner and
the names that may read it are indexed with it (a run's are set once, at its start), and
a search names the caller's principals, so a run they may not read never appears, nor a
snippet of it. It stands on the configuration, as the client does.
"""

from tarry.search.store import (
    RRF_K,
    SCHEMA_VERSION,
    DimensionMismatch,
    IndexedMessage,
    IndexedRun,
    IndexStore,
    MemoryStore,
    Readable,
    SearchHit,
    SearchQuery,
    SearchStore,
    StoreOpener,
    Vector,
    fused,
    open_store,
    since_of,
)

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
    "fused",
    "open_store",
    "since_of",
]
