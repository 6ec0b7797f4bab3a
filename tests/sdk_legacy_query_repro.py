"""sdk-core's legacy-query bug in plain temporalio, no Tarry code: see
docs/sdk-legacy-query-eviction.md. Two scenes bring a query to a worker with history past
the run's last completed task:
- `run_on_a_killed_worker`: a task queued for a dead worker's sticky queue.
  `python -m tests.sdk_legacy_query_repro ADDRESS TASK_QUEUE` runs worker A, whose
  activity hangs until the test kills it.
- `reply_after_a_query_past_a_lost_task`: a task the server started that no worker got,
  as a server restart can lose one."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

from temporalio import activity, workflow
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import PendingWorkflowTaskState
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    PollActivityTaskQueueRequest,
    PollWorkflowTaskQueueRequest,
    ResetStickyTaskQueueRequest,
)
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode
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


async def answer_in_time(query: Awaitable[int]) -> int | None:
    """The query's answer; None if the server gave up on it (DEADLINE_EXCEEDED, "query
    timed out before a worker could process it": 30 s on the dev server, whatever the
    caller's timeout). A scene that holds a query can take that long on a busy machine;
    it then did not happen, rather than failed."""
    try:
        return await query
    except RPCError as e:
        if e.status == RPCStatusCode.DEADLINE_EXCEEDED:
            return None
        raise


@workflow.defn(sandboxed=False)
class Blocker:
    """A run that only waits: its activations, held, take worker B's slots."""

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.query
    def waiting(self) -> bool:
        return True


def _worker_b(client: Client, task_queue: str) -> Worker:
    """Worker B for `reply_after_a_query_past_a_lost_task`: cached (the SDK's default),
    with two slots, each polling one queue, the sticky one and the normal one, and a
    sticky queue the query waits on for as long as the scene takes. Its activity task is
    the test's to take."""
    return Worker(
        client, task_queue=task_queue, workflows=[Conversation, Blocker],
        max_concurrent_workflow_tasks=2, max_concurrent_workflow_task_polls=2,
        nonsticky_to_sticky_poll_ratio=1.0,
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=deadline(60)),
    )  # fmt: skip


class HeldRuns:
    """Wraps a worker's activation handler: holds the activations of `runs` until
    `release`, each taking one of the worker's workflow task slots."""

    def __init__(self, handle: Callable[[WorkflowActivation], Awaitable[None]]) -> None:
        self._handle = handle
        self.runs: set[str | None] = set()
        self.held: set[str] = set()
        self.release = asyncio.Event()

    async def __call__(self, act: WorkflowActivation) -> None:
        if act.run_id in self.runs:
            self.held.add(act.run_id)
            await self.release.wait()
        await self._handle(act)


async def reply_after_a_query_past_a_lost_task(
    client: Client, prepare: Callable[[Worker], None] = lambda worker: None
) -> WorkflowHandle[Conversation, list[str]] | None:
    """A run cached on worker B (`prepare` gets it before it runs), which answers a query
    whose history holds a workflow task the server started but no worker got, then a
    reply: the run; None (the run terminated) if the query did not come that way.

    The query comes directly (the run has no task pending) to B's sticky queue and waits
    there while B does not poll: its two slots are held by two blockers, one reaching it
    on each queue. The activity's result brings a task that goes, the run's stickiness
    reset, to the normal queue, where the test takes it and never completes it. B, let
    go, gets the query with the history as it is then."""
    task_queue = f"sdk-bug-{uuid.uuid4().hex[:8]}"
    worker = _worker_b(client, task_queue)
    prepare(worker)
    workflows = worker._workflow_worker
    assert workflows is not None
    held = HeldRuns(workflows._handle_activation)
    workflows._handle_activation = held  # type: ignore[method-assign]
    namespace, queue = client.namespace, TaskQueue(name=task_queue)
    query: asyncio.Task[int] | None = None
    async with worker:
        cached = await client.start_workflow(
            Blocker.run, id=f"{task_queue}-cached", task_queue=task_queue
        )
        handle = await client.start_workflow(
            Conversation.run, id=f"{task_queue}-run", task_queue=task_queue,
            task_timeout=timedelta(seconds=deadline(5)),
        )  # fmt: skip
        async with asyncio.timeout(deadline(30)):
            while not (await handle.describe()).raw_description.pending_activities:
                await asyncio.sleep(0.05)
        patience = timedelta(seconds=deadline(60))
        blocked = [asyncio.create_task(cached.query(Blocker.waiting, rpc_timeout=patience))]
        held.runs.add(cached.result_run_id)
        fresh = await client.start_workflow(
            Blocker.run, id=f"{task_queue}-fresh", task_queue=task_queue
        )
        held.runs.add(fresh.result_run_id)
        try:
            async with asyncio.timeout(deadline(10)):
                while held.held != held.runs:
                    await asyncio.sleep(0.05)
            query = asyncio.create_task(
                handle.query(Conversation.activities_done, rpc_timeout=patience)
            )
            await asyncio.sleep(deadline(1))  # for the query to reach B's sticky queue
            await client.workflow_service.reset_sticky_task_queue(
                ResetStickyTaskQueueRequest(
                    namespace=namespace, execution=WorkflowExecution(workflow_id=handle.id)
                )
            )
            activity = await client.workflow_service.poll_activity_task_queue(
                PollActivityTaskQueueRequest(namespace=namespace, task_queue=queue)
            )
            await client.get_async_activity_handle(task_token=activity.task_token).complete("done")
            lost = await client.workflow_service.poll_workflow_task_queue(
                PollWorkflowTaskQueueRequest(namespace=namespace, task_queue=queue)
            )
        except TimeoutError:  # a blocker did not reach B: B polls on
            lost = None
        finally:
            held.release.set()
        scene = lost is not None and lost.workflow_execution.workflow_id == handle.id
        if query is not None and not scene:
            query.cancel()
        if query is not None and scene:
            answer = await answer_in_time(query)
            pending = (await handle.describe()).raw_description.pending_workflow_task
            # 1: the query saw the activity's result, while the task it came in is lost.
            scene = (
                answer == 1
                and pending.state == PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_STARTED
                and pending.attempt == 1
            )
        if scene:
            await handle.execute_update(Conversation.reply, "hello")
        await asyncio.gather(*blocked)
        for blocker in (cached, fresh):
            await blocker.terminate()
    if not scene:
        await handle.terminate("the query did not come past the lost task: try again")
        return None
    return handle


if __name__ == "__main__":
    asyncio.run(worker_a(sys.argv[1], sys.argv[2]))
