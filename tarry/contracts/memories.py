"""Memories: what an agent keeps across runs, and a person approves, reads, edits and deletes.

A memory is a short text with tags, in one scope: a person's (their user name), a
group's (`group:NAME`) or an agent's (`agent:NAME`). A run whose `memory` setting is
`read` recalls the memories of its scope; `read-write` also remembers and forgets. Each
memory keeps where it came from (`Provenance`: the run, the turn, who approved it), and
a deleted one is kept, marked, so that its provenance still shows, but never recalled,
listed or edited again.

The memory store (`tarry.search.MemoryStore`) is the only copy of a memory: unlike the
search index beside it, it is not rebuilt from the runs.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

__all__ = ["AGENT_PREFIX", "MEMORY_TEXT_LIMIT", "Memory", "NewMemory", "Provenance"]

AGENT_PREFIX = "agent:"
"""The scope of an agent's memories: `agent:NAME`, the sub-agent's name."""

MEMORY_TEXT_LIMIT = 4000
"""The most characters one memory holds: a fact, not a document."""


class Provenance(BaseModel):
    """Where a memory came from; all None for one a person wrote outside any run."""

    run_id: str | None = None
    turn: int | None = None
    """The run's turn (its model call's number) whose tool call wrote it."""
    approved_by: str | None = None
    """Who approved the call that wrote it; None: no gate asked anyone."""


class NewMemory(BaseModel):
    """A memory to remember. `id` is chosen by the writer (a run: from its id and the
    tool call's), so a retried write is kept once."""

    id: str = Field(min_length=1, max_length=200)
    text: str = Field(min_length=1, max_length=MEMORY_TEXT_LIMIT)
    tags: list[str] = []
    scope: str = Field(min_length=1)
    provenance: Provenance = Provenance()


class Memory(NewMemory):
    """A memory as the store keeps it."""

    created: datetime
    edited: datetime | None = None
    edited_by: str | None = None
    """Who last edited its text or tags."""
    deleted: datetime | None = None
    deleted_by: str | None = None
