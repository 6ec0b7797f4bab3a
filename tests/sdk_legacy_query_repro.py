"""sdk-core's legacy-query bug in plain temporalio, no Tarry code: see
docs/sdk-legacy-query-eviction.md. `python -m tests.sdk_legacy_query_repro ADDRESS
TASK_QUEUE` runs worker A, whose activity hangs until the test kills it;
`run_on_a_killed_worker` sets that scene up."""

from __future__ import annotations

import asyncio
import sys
import uuid
from datetime import timedelta
from pathlib import Path

from temporalio import activity, workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from tests.deadline import deadline

HANG = False
"""True in worker A: its activity attempt never ends, so B's retry completes it."""


@activity.defn
async def work() -> str:
    if HANG:
        await asyncio.sleep(3600)
    return "done"


@workflow.defn(sandboxed=False)
class Conversation:
    def __init__(self) -> None:
        self.replies: list[str] = []
        self.done = 0

    @workflow.run
    async def run(self) -> list[str]:
        await workflow.execute_activity(work, start_to_close_timeout=timedelta(seconds=3))
        self.done += 1
        await workflow.execute_activity(work, start_to_close_timeout=timedelta(seconds=3))
        await workflow.wait_condition(lambda: bool(self.replies))
        return self.replies

    @workflow.update
    def reply(self, text: str) -> None:
        self.replies.append(text)

    @workflow.query
    def activities_done(self) -> int:
        return self.done


async def worker_a(address: str, task_queue: str) -> None:
    global HANG
    HANG = True
    client = await Client.connect(address)
    worker = Worker(client, task_queue=task_queue, workflows=[Conversation], activities=[work])
    async with worker:
        print("worker ready", flush=True)
        await asyncio.Event().wait()


async def run_on_a_killed_worker(client: Client) -> WorkflowHandle[Conversation, list[str]]:
    """A run (on a task queue of its id) whose first activity attempt was running on worker A,
    its own process, when A was killed: the run is sticky to A."""
    task_queue = f"sdk-bug-{uuid.uuid4().hex[:8]}"
    address = client.service_client.config.target_host
    worker_a = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.sdk_legacy_query_repro", address, task_queue,
        cwd=Path(__file__).parents[1], stdout=asyncio.subprocess.PIPE,
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


async def _activity_running(handle: WorkflowHandle[Conversation, list[str]]) -> bool:
    pending = (await handle.describe()).raw_description.pending_activities
    return bool(pending) and pending[0].attempt == 1 and pending[0].HasField("last_started_time")


if __name__ == "__main__":
    asyncio.run(worker_a(sys.argv[1], sys.argv[2]))
