"""The SDK bug `workers.legacy_query` works around, in plain temporalio without the
workaround (docs/sdk-legacy-query-eviction.md). Expected to fail; once it passes
(strict xfail turns that into a failure), an SDK upgrade fixed the bug and the
workaround can go."""

from __future__ import annotations

import asyncio
import sys
import uuid

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Replayer, Worker
from temporalio.workflow import NondeterminismError

from tests.deadline import deadline
from tests.faults import ROOT
from tests.sdk_legacy_query_repro import Conversation, work

ATTEMPTS = 3
"""How often the test sets the scene up before it gives up."""


async def _activity_running(handle: WorkflowHandle[Conversation, list[str]]) -> bool:
    pending = (await handle.describe()).raw_description.pending_activities
    return bool(pending) and pending[0].attempt == 1 and pending[0].HasField("last_started_time")


@pytest.mark.xfail(
    strict=True,
    raises=NondeterminismError,
    reason="sdk-core runs a run past a legacy query's history and keeps it cached: "
    "TMPRL1100 on replay (docs/sdk-legacy-query-eviction.md)",
)
async def test_a_query_while_the_sticky_worker_is_dead_then_an_update_leaves_a_history_that_replays(
    temporal: Client,
) -> None:
    client = await Client.connect(temporal.service_client.config.target_host)  # its own converter
    for _ in range(ATTEMPTS):
        handle = await _run_on_a_killed_worker(client)
        # Worker B, cached (the SDK's default), without the workaround.
        async with Worker(
            client, task_queue=handle.id, workflows=[Conversation], activities=[work]
        ):
            # The query waits for A's sticky queue while B retries the activity, then reaches
            # B with the whole history. On a busy machine it can reach B before the retry:
            # nothing is past the last completed task then, and the bug cannot show.
            if await handle.query(Conversation.activities_done) == 1:
                await handle.execute_update(Conversation.reply, "hello")
                break
        await handle.terminate("the query reached B before the retry: try again")
    else:
        pytest.fail(f"the query reached B before the activity's retry in {ATTEMPTS} tries")

    history = await handle.fetch_history()
    await Replayer(workflows=[Conversation]).replay_workflow(history)


async def _run_on_a_killed_worker(client: Client) -> WorkflowHandle[Conversation, list[str]]:
    """A run (on a task queue of its id) whose first activity attempt was running on worker A,
    its own process, when A was killed: the run is sticky to A."""
    task_queue = f"sdk-bug-{uuid.uuid4().hex[:8]}"
    address = client.service_client.config.target_host
    worker_a = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.sdk_legacy_query_repro", address, task_queue,
        cwd=ROOT, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert worker_a.stdout is not None
        async with asyncio.timeout(deadline(30)):
            while b"worker ready" not in await worker_a.stdout.readline():
                pass
        handle = await client.start_workflow(Conversation.run, id=task_queue, task_queue=task_queue)
        async with asyncio.timeout(deadline(30)):
            while not await _activity_running(handle):
                await asyncio.sleep(0.1)
    finally:
        worker_a.kill()  # SIGKILL, its activity attempt running, the run sticky to it
        await worker_a.wait()
    return handle
