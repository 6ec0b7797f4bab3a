"""The interface every memory store keeps: the memories of `tarry.contracts.memories`.

Memories live beside the search index, in the same store (one location,
`TARRY_SEARCH_INDEX`, one connection, one schema version and upgrade path), yet behind an
interface of their own: the index is a copy of the runs, cleared and rebuilt at will
(`SearchStore.clear`), while the memory store is the only copy of its memories, so
nothing of the index's touches them; and a door that reads memories needs nothing else.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence

from tarry.contracts import ErrorCode, RunInput
from tarry.contracts.memories import Memory, NewMemory
from tarry.core.errors import TarryError
from tarry.core.identities import Caller
from tarry.core.ownership import Policy, principals

__all__ = ["MemoryStore", "memory_scopes", "refuse_foreign_scope", "visible"]


def memory_scopes(policy: Policy, caller: Caller) -> frozenset[str] | None:
    """The scopes whose memories `caller` may list, read, edit and delete: their own and
    their groups'; None: every scope (an admin, or a deployment of one person)."""
    return None if policy.sees_all(caller) else frozenset(principals(caller))


def refuse_foreign_scope(policy: Policy, caller: Caller, input: RunInput) -> None:
    """`NOT_ALLOWED` (403 over HTTP) for a run whose `memory_scope` is not the caller's
    own or one of their groups' (an admin may name any); no scope is the caller's own.
    Every door that starts runs asks it: the API, `tarry mcp`, schedules."""
    scope, scopes = input.memory_scope, memory_scopes(policy, caller)
    if scope is not None and scopes is not None and scope not in scopes:
        raise TarryError(
            ErrorCode.NOT_ALLOWED,
            f"memory_scope {scope!r} is not yours: name your own, or a group of yours"
            f" ({', '.join(sorted(scopes))}), or leave it out for your own",
        )


def visible(memory: Memory | None, memory_id: str, scopes: frozenset[str] | None) -> Memory:
    """`memory` if it is one of `scopes`; `MEMORY_NOT_FOUND` otherwise, whether or not
    it exists, so that no one learns of another's memory by its id."""
    if memory is None or (scopes is not None and memory.scope not in scopes):
        raise TarryError(
            ErrorCode.MEMORY_NOT_FOUND,
            f"no memory {memory_id!r} of yours: `tarry memory list` (or GET /v1/memories)"
            " shows those you may see",
        )
    return memory


class MemoryStore(ABC):
    """Memories, each in one scope (a user, `group:NAME`, `agent:NAME`). A deleted memory
    is kept, marked, for its provenance, but `recall` and `list_memories` never answer it
    and `edit` and `forget` leave it as it is. `scopes` of None: every scope (an admin,
    an operator's command line)."""

    @abstractmethod
    async def remember(self, memory: NewMemory, vector: Sequence[float] | None = None) -> Memory:
        """Keeps `memory`, and `vector`, its text's embedding (None: it is found by its
        words alone); one of the same id already kept (a retried write) is answered as it
        is, unchanged."""

    @abstractmethod
    async def recall(
        self,
        query: str,
        scopes: Collection[str] | None,
        limit: int = 10,
        embedding: Sequence[float] | None = None,
    ) -> list[Memory]:
        """The memories of `scopes` with any word of `query` in their text or tags, best
        first; for a query of no words, the newest. With `embedding`, `query`'s, also the
        memories nearest it by the cosine of their vectors (those of its length), the two
        rankings fused as a search's are (`fuse`): a memory of none of its words is
        recalled by its meaning."""

    @abstractmethod
    async def get(self, memory_id: str) -> Memory | None:
        """The memory `memory_id`, deleted or not; None: there is none."""

    @abstractmethod
    async def list_memories(
        self, scopes: Collection[str] | None, limit: int = 100, *, deleted: bool = False
    ) -> list[Memory]:
        """The memories of `scopes`, newest first; with `deleted`, the deleted ones too."""

    @abstractmethod
    async def edit(
        self,
        memory_id: str,
        by: str,
        *,
        text: str | None = None,
        tags: list[str] | None = None,
        vector: Sequence[float] | None = None,
    ) -> Memory | None:
        """Sets the text or tags (None: as they are) of the memory `memory_id`, noting
        `by` and when; a new text, its `vector` too (None: none, found by its words
        alone until it has one). None: there is none, or it was deleted."""

    @abstractmethod
    async def forget(self, memory_id: str, by: str) -> Memory | None:
        """Marks the memory `memory_id` deleted by `by`, and answers it; one deleted
        before is answered as it was; None: there is none."""

    @abstractmethod
    async def schema_version(self) -> int:
        """The version of the schema the store holds."""

    @abstractmethod
    async def close(self) -> None: ...
