"""`/v1/memories`: the memories agents keep across runs (`tarry.contracts.memories`), for
the people whose they are: a caller lists, reads, edits and deletes their own scope's
memories and their groups' (admins: all); another's answer 404, as if there were none.

A run's `memory_scope` is checked by the same rule when the run starts, at every door
(`tarry.search.memory_store.refuse_foreign_scope`): no one starts a run that reads or
writes another's memories.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Annotated

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel

from tarry.api.auth import CallerOf
from tarry.api.errors import AUTH, error_answers
from tarry.api.parts import PartsOf
from tarry.contracts.memories import Memory, MemoryEdit
from tarry.search.memory_store import memory_scopes, visible

__all__ = ["MemoryList", "memories_router"]

MemoryId = Annotated[str, Path(min_length=1, max_length=200)]


class MemoryList(BaseModel):
    memories: list[Memory]
    """Newest first; with `q`, best first."""


def memories_router() -> APIRouter:
    router = APIRouter(prefix="/v1/memories", tags=["memories"])
    missing = error_answers(*AUTH, HTTPStatus.NOT_FOUND, HTTPStatus.UNPROCESSABLE_ENTITY)

    @router.get("", responses=error_answers(*AUTH, HTTPStatus.UNPROCESSABLE_ENTITY))
    async def list_memories(
        q: Annotated[str | None, Query(max_length=1000)] = None,
        deleted: bool = False,
        limit: Annotated[int, Query(ge=1, le=500)] = 100,
        *,
        caller: CallerOf,
        parts: PartsOf,
    ) -> MemoryList:
        """The memories the caller may see, newest first; `q`: those a run's `recall` of
        its words finds, best first; `deleted`: the deleted ones too. 503
        `SEARCH_UNAVAILABLE` where the deployment keeps no store."""
        store, scopes = await parts.search.store(), memory_scopes(parts.policy, caller)
        if q is not None:
            return MemoryList(memories=await store.recall(q, scopes, limit))
        return MemoryList(memories=await store.list_memories(scopes, limit, deleted=deleted))

    @router.get("/{memory_id}", responses=missing)
    async def get_memory(memory_id: MemoryId, caller: CallerOf, parts: PartsOf) -> Memory:
        """One memory, with its provenance (the run, the turn, who approved it); 404
        `MEMORY_NOT_FOUND` for none the caller may see."""
        store = await parts.search.store()
        return visible(await store.get(memory_id), memory_id, memory_scopes(parts.policy, caller))

    @router.patch("/{memory_id}", responses=missing)
    async def edit_memory(
        memory_id: MemoryId, change: MemoryEdit, caller: CallerOf, parts: PartsOf
    ) -> Memory:
        """Replaces the text or tags the body names; later runs recall it as edited. 404
        `MEMORY_NOT_FOUND` for none the caller may see, or a deleted one."""
        store, scopes = await parts.search.store(), memory_scopes(parts.policy, caller)
        visible(await store.get(memory_id), memory_id, scopes)
        vector = None if change.text is None else await parts.search.embedding_of(change.text)
        edited = await store.edit(
            memory_id, caller.user, text=change.text, tags=change.tags, vector=vector
        )
        return visible(edited, memory_id, scopes)

    @router.delete("/{memory_id}", responses=missing)
    async def delete_memory(memory_id: MemoryId, caller: CallerOf, parts: PartsOf) -> Memory:
        """Deletes the memory: no run recalls it again. It is kept, marked, with its
        provenance, which `GET` still shows. 404 `MEMORY_NOT_FOUND` for none the caller
        may see."""
        store, scopes = await parts.search.store(), memory_scopes(parts.policy, caller)
        visible(await store.get(memory_id), memory_id, scopes)
        return visible(await store.forget(memory_id, caller.user), memory_id, scopes)

    return router
