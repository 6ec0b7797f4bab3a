"""Memories: what an agent keeps across runs, and a person approves, reads, edits and deletes.

A memory is a short text with tags, in one scope: a person's (their user name), a
group's (`group:NAME`) or an agent's (`agent:NAME`). A run whose `memory_access` is
`read` recalls the memories of its scope; `read-write` also remembers and forgets. Each
memory keeps where it came from (`Provenance`: the run, the turn, who approved it), and
a deleted one is kept, marked, so that its provenance still shows, but never recalled,
listed or edited again.

The memory store (`tarry.search.MemoryStore`) is the only copy of a memory: unlike the
search index beside it, it is not rebuilt from the runs.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

__all__ = [
    "AGENT_PREFIX",
    "FORGET_TOOL",
    "MEMORY_TEXT_LIMIT",
    "MEMORY_TOOLS",
    "RECALL_TOOL",
    "REMEMBER_TOOL",
    "ForgetArguments",
    "Memory",
    "MemoryAccess",
    "MemoryEdit",
    "NewMemory",
    "Provenance",
    "RecallArguments",
    "RememberArguments",
    "scope_problem",
]

AGENT_PREFIX = "agent:"
"""The scope of an agent's memories: `agent:NAME`, the sub-agent's name."""

MEMORY_TEXT_LIMIT = 4000
"""The most characters one memory holds: a fact, not a document."""


REMEMBER_TOOL, RECALL_TOOL, FORGET_TOOL = "remember", "recall", "forget"
MEMORY_TOOLS = (REMEMBER_TOOL, RECALL_TOOL, FORGET_TOOL)
"""The memory tools a run offers (`RunInput.memory_access`), each run by the activity named
after it: a worker's own tool may not take these names."""


class MemoryAccess(StrEnum):
    """A run's `memory_access`: which memory tools it offers its model."""

    OFF = "off"
    """None (the default)."""
    READ = "read"
    """`recall` alone."""
    READ_WRITE = "read-write"
    """`recall`, `remember` and `forget`."""

    def tools(self) -> tuple[str, ...]:
        return {self.OFF: (), self.READ: (RECALL_TOOL,)}.get(self, MEMORY_TOOLS)


def scope_problem(scope: str) -> str | None:
    """Why `scope` names no memory scope (a user, `group:NAME`, `agent:NAME`); None if it
    does. Scopes are compared as they are written, so no spaces around one."""
    bare = scope.removeprefix("group:").removeprefix(AGENT_PREFIX)
    if not bare.strip() or bare != bare.strip() or not scope.isprintable():
        return f"{scope!r} is no memory scope: give a user, group:NAME or agent:NAME"
    return None


class RememberArguments(BaseModel):
    """Remember a fact for later runs: something worth knowing next time, in one or two
    sentences. A person may have to approve it first."""

    text: str = Field(min_length=1, max_length=MEMORY_TEXT_LIMIT, description="The fact.")
    tags: list[str] = Field(default=[], description="Words to find it by, such as 'people'.")


class RecallArguments(BaseModel):
    """Recall what earlier runs remembered: the memories with any word of the query,
    best first (an empty query: the newest)."""

    query: str = Field(description="Words the memory may hold, such as 'blog owner'.")


class ForgetArguments(BaseModel):
    """Forget a memory that is wrong or no longer true: it is never recalled again."""

    id: str = Field(min_length=1, description="The memory's id, as `recall` gave it.")


class Provenance(BaseModel):
    """Where a memory came from; all None for one a person wrote outside any run."""

    run_id: str | None = None
    turn: int | None = None
    """The run's turn (its model call's number) whose tool call wrote it."""
    approved_by: str | None = None
    """Who approved the call that wrote it (`DecisionRecord.user`: a person, or `rule N`
    for one of the run's approval rules); None: no gate asked anyone."""


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


class MemoryEdit(BaseModel):
    """A person's edit of a memory (`tarry memory edit`, `PATCH /v1/memories/{id}`):
    what it names replaces the memory's own; null keeps it."""

    text: str | None = Field(default=None, min_length=1, max_length=MEMORY_TEXT_LIMIT)
    tags: list[str] | None = None
