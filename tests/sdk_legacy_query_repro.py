"""sdk-core's legacy-query bug in plain temporalio, no Tarry code: see
docs/sdk-legacy-query-eviction.md. `python -m tests.sdk_legacy_query_repro ADDRESS
TASK_QUEUE` runs worker A, whose activity hangs until the test kills it."""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

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


if __name__ == "__main__":
    asyncio.run(worker_a(sys.argv[1], sys.argv[2]))
