"""The SDK bug `workers.legacy_query` works around, in plain temporalio without the
workaround (docs/sdk-legacy-query-eviction.md), in both scenes that bring a query past a
run's last completed task. Expected to fail; once it passes (strict xfail turns that into
a failure), an SDK upgrade fixed the bug and the workaround can go."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError
from temporalio.worker import Replayer, Worker
from temporalio.workflow import NondeterminismError

from tests.faults import until_the_scene_happens
from tests.sdk_legacy_query_repro import (
    Conversation,
    reply_after_a_query_past_a_lost_task,
    run_on_a_killed_worker,
    work,
)

Scene = Callable[[Client], Awaitable[WorkflowHandle[Conversation, list[str]] | None]]


async def _reply_after_a_query_while_the_sticky_worker_is_dead(
    client: Client,
) -> WorkflowHandle[Conversation, list[str]] | None:
    """A run on a killed worker A whose worker B, cached (the SDK's default), without the
    workaround, answers a query past the run's last completed task, then a reply: the run;
    None (the run ended) if the query reached B before the activity's retry."""
    handle = await run_on_a_killed_worker(client)
    async with Worker(client, task_queue=handle.id, workflows=[Conversation], activities=[work]):
        # The query waits for A's sticky queue while B retries the activity, then reaches
        # B with the whole history. On a busy machine it can reach B before the retry:
        # nothing is past the last completed task then, and the bug cannot show; or the
        # server can cancel it first (fresh85). Either way the scene was missed.
        try:
            done = await handle.query(Conversation.activities_done)
        except RPCError:  # the server gave up the query on A's queue ("context canceled")
            done = None
        if done == 1:
            await handle.execute_update(Conversation.reply, "hello")
            return handle
    await handle.terminate("the query reached B before the retry: try again")
    return None


SCENES = [
    pytest.param(
        _reply_after_a_query_while_the_sticky_worker_is_dead,
        "the query reaching B after the activity's retry",
        id="sticky-worker-dead",
    ),
    pytest.param(
        reply_after_a_query_past_a_lost_task,
        "the query reaching B past the lost task",
        id="task-no-worker-got",
    ),
]


@pytest.mark.xfail(
    strict=True,
    raises=NondeterminismError,
    reason="sdk-core runs a run past a legacy query's history and keeps it cached: "
    "TMPRL1100 on replay (docs/sdk-legacy-query-eviction.md)",
)
@pytest.mark.parametrize(("scene", "what"), SCENES)
async def test_a_query_past_the_last_completed_task_then_an_update_leaves_a_history_that_replays(
    temporal: Client, scene: Scene, what: str
) -> None:
    client = await Client.connect(temporal.service_client.config.target_host)  # its own converter
    handle = await until_the_scene_happens(partial(scene, client), what)
    history = await handle.fetch_history()
    await Replayer(workflows=[Conversation]).replay_workflow(history)
