"""The memory tools' activities, `remember`, `recall` and `forget`, over the worker's
memory store (`TARRY_SEARCH_INDEX`, `tarry.search.MemoryStore`).

With the worker's embedding profile (as the index's), a memory is kept with its text's
embedding and `recall` ranks by words and by meaning (`MemoryStore.recall`); without, by
words alone. The run decides which of them it offers (`RunInput.memory_access`) and whose
memories they touch (`MemoryInvocation.scope`); approval gates, rules and approvers have had
their say before an activity runs, and the arguments it gets are those the call was
approved with (a person may have edited the text). As any tool's, what goes wrong is a
failed result the model reads, not a failed activity.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio import activity

from activities import metrics, traces
from tarry.contracts import ErrorCode, MemoryInvocation, ToolResult
from tarry.contracts.memories import (
    FORGET_TOOL,
    RECALL_TOOL,
    REMEMBER_TOOL,
    ForgetArguments,
    Memory,
    NewMemory,
    Provenance,
    RecallArguments,
    RememberArguments,
)
from tarry.core.errors import TarryError
from tarry.search import MemoryStore, StoreOpener

__all__ = ["RECALL_LIMIT", "MemoryTools"]

RECALL_LIMIT = 10
"""The most memories one `recall` answers: a tool result the model reads whole."""

A = TypeVar("A", bound=BaseModel)


class MemoryTools:
    """Hosts the memory tools' activities over the worker's store."""

    def __init__(self, stores: StoreOpener) -> None:
        """`stores`: the worker's, with its embedding profile if it has one."""
        self._stores = stores

    def activities(self) -> list[Callable[..., Any]]:
        return [self.remember, self.recall, self.forget]

    @activity.defn(name=REMEMBER_TOOL)
    async def remember(self, invocation: MemoryInvocation) -> ToolResult:
        """Keeps the memory; its id is the call's, so a retried call keeps it once."""

        async def remember(store: MemoryStore, args: RememberArguments) -> object:
            decided = invocation.decision
            vector = await self._stores.embedding_of(args.text)
            kept = await store.remember(
                NewMemory(
                    id=_memory_id(invocation),
                    text=args.text,
                    tags=args.tags,
                    scope=invocation.scope,
                    provenance=Provenance(
                        run_id=invocation.run,
                        turn=invocation.turn,
                        approved_by=decided.user if decided is not None else None,
                    ),
                ),
                vector,
            )
            return _shown(kept)

        return await _call(REMEMBER_TOOL, invocation, self._stores, RememberArguments, remember)

    @activity.defn(name=RECALL_TOOL)
    async def recall(self, invocation: MemoryInvocation) -> ToolResult:
        """The memories of the run's scope that match the query, best first."""

        async def recall(store: MemoryStore, args: RecallArguments) -> object:
            embedding = await self._stores.embedding_of(args.query)
            found = await store.recall(args.query, {invocation.scope}, RECALL_LIMIT, embedding)
            return [_shown(m) for m in found]

        return await _call(RECALL_TOOL, invocation, self._stores, RecallArguments, recall)

    @activity.defn(name=FORGET_TOOL)
    async def forget(self, invocation: MemoryInvocation) -> ToolResult:
        """Deletes a memory of the run's scope; one of another scope is no business of it."""

        async def forget(store: MemoryStore, args: ForgetArguments) -> object:
            found = await store.get(args.id)
            if found is None or found.scope != invocation.scope:
                return ToolResult.failure(
                    ErrorCode.TOOL_FAILED,
                    f"no memory {args.id!r} in this run's memories: `recall` gives their ids",
                )
            decided = invocation.decision
            by = decided.user if decided is not None and decided.user else invocation.run
            await store.forget(args.id, by=by)
            return {"id": args.id, "forgotten": True}

        return await _call(FORGET_TOOL, invocation, self._stores, ForgetArguments, forget)


async def _call(
    name: str,
    invocation: MemoryInvocation,
    stores: StoreOpener,
    arguments: type[A],
    work: Callable[[MemoryStore, A], Awaitable[object]],
) -> ToolResult:
    """One memory tool's call, traced and counted as any tool's; its failures as results."""
    with traces.tool_call(name, invocation) as span:
        try:
            args = arguments.model_validate_json(invocation.arguments)
        except ValidationError as e:
            problems = "; ".join(
                f"{'.'.join(map(str, err['loc'])) or 'arguments'}: {err['msg']}"
                for err in e.errors(include_url=False, include_input=False)
            )
            result = ToolResult.failure(
                ErrorCode.TOOL_INVALID_ARGUMENTS, f"invalid arguments for {name}: {problems}"
            )
        else:
            try:
                data = await work(await stores.store(), args)
            except TarryError as e:
                data = ToolResult.failure(ErrorCode.TOOL_FAILED, e.message)
            result = data if isinstance(data, ToolResult) else ToolResult.success(data)
        traces.tool_ended(span, result)
    metrics.tool_called(name, result)
    return result


def _memory_id(invocation: MemoryInvocation) -> str:
    """The id of the memory a `remember` call keeps: the same for every attempt of the
    call, another for each call of each run of a chain."""
    origin = f"{activity.info().workflow_run_id}/{invocation.call_id}"
    return "m-" + hashlib.sha256(origin.encode()).hexdigest()[:16]


def _shown(memory: Memory) -> dict[str, Any]:
    """A memory as the model reads it: its id (to forget it by), text, tags and date."""
    return {
        "id": memory.id,
        "text": memory.text,
        "tags": memory.tags,
        "remembered": memory.created.date().isoformat(),
    }
