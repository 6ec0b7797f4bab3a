"""The legacy-query eviction (`workers.legacy_query`) when a workflow task reaches the
worker while it answers a legacy query: on a busy worker, the reply that ends a wait can
come while the query that found the run ahead of the server is still being answered.

Core keeps such a task back and hands it over as soon as the query's answer is in,
before the worker could ask for an eviction after answering: the task then ran on the
run as the query had left it, ahead of the server, and its history stopped replaying
(`TMPRL1100`, seen in `tests/test_soak.py`). Asked before the answer, the eviction comes
first and the task runs on a run rebuilt from history.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from functools import partial
from typing import Any

from temporalio.api.enums.v1 import PendingWorkflowTaskState
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Replayer, Worker

from tests.deadline import deadline
from tests.faults import until_the_scene_happens, wait_until
from tests.sdk_legacy_query_repro import (
    Conversation,
    answer_in_time,
    run_on_a_killed_worker,
    work,
)
from workers.legacy_query import Handler, brings_a_legacy_query, install

SCHEDULED = PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_SCHEDULED
STARTED = PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_STARTED


class HeldLegacyQueries:
    """Wraps a worker's activation handler, the eviction included: holds each legacy
    query's activation until the test releases it, as a busy worker would be slow to
    get to it, while the worker goes on polling."""

    def __init__(self, handle: Handler) -> None:
        self._handle = handle
        self.holding = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, act: WorkflowActivation) -> None:
        if brings_a_legacy_query(act):
            self.holding.set()
            await self.release.wait()
        await self._handle(act)


async def test_a_reply_that_comes_while_a_legacy_query_is_answered_leaves_a_history_that_replays(
    temporal: Client,
) -> None:
    client = await Client.connect(temporal.service_client.config.target_host)  # its own converter
    handle = await until_the_scene_happens(
        partial(_reply_while_a_legacy_query_is_answered, client),
        "a reply's task reaching B while it answers a legacy query",
    )

    history = await handle.fetch_history()
    await Replayer(workflows=[Conversation]).replay_workflow(history)


async def _reply_while_a_legacy_query_is_answered(
    client: Client,
) -> WorkflowHandle[Conversation, list[str]] | None:
    """A run on a killed worker A whose worker B, cached, with Tarry's eviction, answers a
    query that finds the run ahead of the server, and the reply's task reaches B while it
    does: the run, once the reply is in its history; None (the run ended) if the scene
    did not happen."""
    handle = await run_on_a_killed_worker(client)
    worker_b = Worker(client, task_queue=handle.id, workflows=[Conversation], activities=[work])
    install(worker_b)
    workflows = worker_b._workflow_worker
    assert workflows is not None
    held = HeldLegacyQueries(workflows._handle_activation)
    workflows._handle_activation = held  # type: ignore[method-assign]
    async with worker_b:
        # The query waits for A's sticky queue, then goes to B; held there, it must not
        # time out before the task that follows has come too.
        patience = timedelta(seconds=deadline(120))
        done = handle.query(Conversation.activities_done, rpc_timeout=patience)
        query = asyncio.create_task(done)
        reply: asyncio.Task[None] | None = None
        try:
            async with asyncio.timeout(deadline(60)):
                await held.holding.wait()
            # The task that follows the activity's retry is still queued for A's dead
            # sticky queue: the reply rides on it when it comes to B.
            if await _workflow_task(handle) == SCHEDULED:
                reply = asyncio.create_task(handle.execute_update(Conversation.reply, "hello"))
                await wait_until(
                    lambda: _started(handle), timeout=deadline(60), what="the task at B"
                )
        finally:
            held.release.set()
        # 1: the query came with the retry's result, past the last completed task.
        answer = await answer_in_time(query)
        if reply is None or answer != 1:
            if reply is not None:
                reply.cancel()
            await handle.terminate("the scene did not happen: try again")
            return None
        await reply
        return handle


async def _workflow_task(handle: WorkflowHandle[Any, Any]) -> PendingWorkflowTaskState.ValueType:
    return (await handle.describe()).raw_description.pending_workflow_task.state


async def _started(handle: WorkflowHandle[Any, Any]) -> bool:
    return await _workflow_task(handle) == STARTED
