"""How a handle reaches its run: the worker checks, the queries, and the updates asked
again while the server refuses them unadmitted.

Only a worker answers a query or takes an update, and Temporal holds either for a long
time when none polls, then answers with a bare RPC error. So a handle first looks for a
worker (`RUN_NOT_SERVED` within seconds), tells a run whose workflow task keeps failing
(`RUN_TASK_FAILING`) from a slow one, and sends an update the server refused without
admitting it again under the same id, so it never enters twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from typing import Any, TypeVar

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import PollerInfo, TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    DescribeWorkflowExecutionResponse,
    GetWorkflowExecutionHistoryReverseRequest,
)
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from tarry.client.temporal_errors import translated_errors, unadmitted
from tarry.contracts import ErrorCode, RunResult, RunState
from tarry.core.errors import TarryError

__all__ = ["QUERY_PATIENCE", "Delivery", "await_poller", "polling_pauses", "task_failing"]

Q = TypeVar("Q")
"""What a query answers."""
A = TypeVar("A")
"""What an update's attempt answers."""
StartOperation = Callable[[], WithStartWorkflowOperation[Any, RunResult]]
"""Builds the start an update goes with, afresh for each attempt."""

QUERY_PATIENCE = timedelta(seconds=5)
"""How long a `state` query may go unanswered before the client asks whether any worker
serves the run at all: without one, Temporal holds a query for 30 s, then answers with a
bare RPC error."""
_UNANSWERED = {
    RPCStatusCode.CANCELLED,  # "Timeout expired": the server's own deadline
    RPCStatusCode.DEADLINE_EXCEEDED,  # ours, `QUERY_PATIENCE`
    RPCStatusCode.FAILED_PRECONDITION,  # "no poller seen for task queue recently"
}
_SAYS_NOTHING = {
    RPCStatusCode.CANCELLED,  # "operation was canceled": a busy dev server, now and then
    RPCStatusCode.UNAVAILABLE,
    RPCStatusCode.DEADLINE_EXCEEDED,
}
"""Answers to a task queue's description that say nothing of its pollers: asked again."""


WORKER_GRACE = 5.0
"""Seconds the client looks for a worker polling a run's task queue before it says there
is none (`RUN_NOT_SERVED`): a worker that has just started polls within this."""
SERVED_FOR = 30.0
"""Seconds a handle trusts that a worker serves its run once it saw one poll: a chat's
replies come seconds apart, and each check costs two RPCs before the reply travels."""
NOT_READY_PATIENCE = 60.0
"""Seconds an update is asked again while the server refuses it because the run's
workflow task is failing or timing out (a worker too busy to finish it, or restarting)."""


class Delivery:
    """Queries and updates to one run, by workflow id, checked and retried as above."""

    def __init__(self, client: Client, handle: WorkflowHandle[object, RunResult]) -> None:
        self._client = client
        self._handle = handle
        self._served_until = 0.0  # `loop.time()` until which a worker is trusted to serve

    async def update(self, name: str, *args: object, id: str | None = None) -> RunState:
        """The update `name`, answered with the state at the run's next stop point.
        The server may refuse an update without admitting it: while the run's workflow
        task is failing (`WorkflowNotReadyFailure`), or when a worker finished a task
        without taking it in (`UnprocessedUpdate`, as after a server restart). Either
        way nothing entered the run, so it is asked again, with the same update id: an
        attempt that did enter is answered with its first outcome, never run twice."""
        await self.require_worker()
        update_id = id or f"{name}-{uuid.uuid4()}"

        async def attempt() -> RunState:
            state: RunState = await self._handle.execute_update(
                name, args=args, id=update_id, result_type=RunState
            )
            return state

        return await self._admitted(name, attempt)

    async def update_with_start(
        self, name: str, arg: object, start: StartOperation, *, id: str | None = None
    ) -> RunState | None:
        """The update `name` of `arg` in the same call as the start `start()` builds (a
        conditional start: `WorkflowIDConflictPolicy.FAIL`), answered as `update` is;
        None, having delivered nothing, when a run has the id already. A refusal without
        admission is asked again as `update`'s are, the start with it: if the refused
        call did start the run, the next finds it there and answers None, so the message
        goes to it as to any run there is."""
        update_id = id or f"{name}-{uuid.uuid4()}"

        async def attempt() -> RunState | None:
            operation = start()  # an operation is used once
            try:
                state: RunState = await self._client.execute_update_with_start_workflow(
                    name,
                    arg,
                    start_workflow_operation=operation,
                    id=update_id,
                    result_type=RunState,
                )
                return state
            except Exception as e:
                # A failed start leaves its error in the operation as well: read there,
                # or asyncio reports it as never retrieved.
                with contextlib.suppress(Exception):
                    await operation.workflow_handle()
                if isinstance(e, WorkflowAlreadyStartedError):
                    return None
                raise

        return await self._admitted(name, attempt)

    async def _admitted(self, name: str, attempt: Callable[[], Awaitable[A]]) -> A:
        """`attempt()`, asked again while the server refuses it without admitting the
        update `name` (see `update`), for up to `NOT_READY_PATIENCE`."""
        loop = asyncio.get_running_loop()
        give_up, delay = loop.time() + NOT_READY_PATIENCE, 0.1
        async with translated_errors(self._handle.id):
            while True:
                try:
                    return await attempt()
                except (RPCError, WorkflowUpdateFailedError) as e:
                    if not unadmitted(e):
                        raise
                    # A task that fails (not one whose worker died) fails again: say so now.
                    if failing := await self._task_failing(failed_only=True):
                        raise failing from e
                    if loop.time() + delay > give_up:
                        if failing := await self._task_failing():
                            raise failing from e
                        raise TarryError(
                            ErrorCode.RUN_NOT_SERVED,
                            f"run {self._handle.id!r} did not take the {name!r} update in "
                            f"{NOT_READY_PATIENCE:g}s (its worker is failing or restarting); "
                            "nothing was delivered, sending it again is safe",
                        ) from e
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def query(self, name: str, result_type: type[Q], *args: object) -> Q:
        """The query `name`. Raises `RUN_NOT_SERVED` within `QUERY_PATIENCE` when no
        worker polls the run's task queue: only a worker answers a query, and without one
        Temporal holds it for 30 s, then answers with a bare RPC error."""
        async with translated_errors(self._handle.id):
            answer: Q
            try:
                answer = await self._handle.query(
                    name, args=args, result_type=result_type, rpc_timeout=QUERY_PATIENCE
                )
                return answer
            except RPCError as e:
                if failing := await self._task_failing():
                    raise failing from e
                if e.status not in _UNANSWERED:
                    raise
                await self.require_worker(even_ended=True)
            # A worker polls, so it is slow rather than gone: wait for it as long as it takes.
            try:
                answer = await self._handle.query(name, args=args, result_type=result_type)
                return answer
            except RPCError as e:
                if failing := await self._task_failing():
                    raise failing from e
                raise

    async def _task_failing(self, *, failed_only: bool = False) -> TarryError | None:
        try:
            description = (await self.describe()).raw_description
        except TarryError as e:
            if e.code is not ErrorCode.RUN_NOT_FOUND:
                raise
            return None  # a start refused before the run began: no task of it fails
        return await task_failing(self._client, description, failed_only=failed_only)

    async def describe(self) -> WorkflowExecutionDescription:
        """What Temporal itself records of the run (status, task queue, search attributes
        such as `TarryPhase`): known without a worker, unlike `state`."""
        async with translated_errors(self._handle.id):
            return await self._handle.describe()

    async def require_worker(self, *, even_ended: bool = False) -> None:
        """Raises `RUN_NOT_SERVED` when no worker polls the run's task queue: a query
        or an update would wait for one until the server gives up. Ended runs pass
        unless `even_ended`: Temporal refuses an update to one by itself (`RUN_ENDED`),
        but only a worker answers a query."""
        loop = asyncio.get_running_loop()
        if loop.time() < self._served_until:
            return
        description = await self.describe()
        if description.status is not WorkflowExecutionStatus.RUNNING and not even_ended:
            return
        queue = description.raw_description.execution_config.task_queue.name
        await await_poller(self._client, queue, self._handle.id)
        self._served_until = loop.time() + SERVED_FOR


async def await_poller(client: Client, queue: str, run_id: str) -> frozenset[str]:
    """The workers polling task queue `queue` (`worker_of`), or `RUN_NOT_SERVED` when
    none does. A worker that has just started (or a busy one) may not have polled yet: it
    is looked for again for `WORKER_GRACE` before saying there is none. An answer that
    says nothing of the pollers (`_SAYS_NOTHING`, from a busy server) is asked again within
    the same time. Empty from a server that cannot tell."""
    loop = asyncio.get_running_loop()
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    give_up = loop.time() + WORKER_GRACE
    while True:
        try:
            pollers = await client.workflow_service.describe_task_queue(request)
        except RPCError as e:
            if e.status is RPCStatusCode.UNIMPLEMENTED:
                return frozenset()  # a server that cannot tell (time-skipping): ask the run
            if e.status not in _SAYS_NOTHING or loop.time() > give_up:
                raise
        else:
            if pollers.pollers:
                return frozenset(map(worker_of, pollers.pollers))
            if loop.time() > give_up:
                raise TarryError(
                    ErrorCode.RUN_NOT_SERVED,
                    f"no worker polls task queue {queue!r}, so run {run_id!r} cannot answer;"
                    f" start one with `tarry worker` (TARRY_TASK_QUEUE={queue}) or `tarry dev`",
                )
        await asyncio.sleep(0.25)


def worker_of(poller: PollerInfo) -> str:
    """A polling worker, as its identity and build: a worker restarted or deployed anew
    is another (unless it was given the same identity and build)."""
    build = poller.deployment_options.build_id or poller.worker_version_capabilities.build_id
    return f"{poller.identity}@{build}"


def polling_pauses(first: float = 0.05, longest: float = 0.5) -> Iterator[float]:
    """The pauses between the polls of a wait, in seconds: `first` while most waits end
    (a run's step takes tens of milliseconds), then half as long again each time, up to
    `longest`. A poll is a query that the worker and the server each spend several
    milliseconds of CPU on: every 50 ms, a wait of minutes kept a fifth of a core busy."""
    pause = first
    while True:
        yield pause
        pause = min(pause * 1.5, longest)


async def task_failing(
    client: Client, description: DescribeWorkflowExecutionResponse, *, failed_only: bool = False
) -> TarryError | None:
    """`RUN_TASK_FAILING`, with the failure Temporal recorded last, for the run
    `description` describes when its workflow task is past its first attempt; else None.
    Such a run answers no query until a worker completes its task, which a retry of the
    query does not bring. `failed_only`: None too when no attempt failed, but timed out
    (a worker that died or restarted, which the next one may well mend)."""
    attempt = description.pending_workflow_task.attempt
    if attempt < 2:
        return None
    run_id = description.workflow_execution_info.execution.workflow_id
    request = GetWorkflowExecutionHistoryReverseRequest(
        namespace=client.namespace,
        execution=WorkflowExecution(workflow_id=run_id),
        maximum_page_size=100,
    )
    history = await client.workflow_service.get_workflow_execution_history_reverse(request)
    failures = (
        e.workflow_task_failed_event_attributes.failure.message
        for e in history.history.events
        if e.HasField("workflow_task_failed_event_attributes")
    )
    reason = next(failures, None)
    if reason is None and failed_only:
        return None
    return TarryError(
        ErrorCode.RUN_TASK_FAILING,
        f"run {run_id!r} is stuck: its workflow task has not completed in {attempt} "
        f"attempts (last failure: {reason or 'timed out'}); it answers and goes on once a"
        " worker can complete it. See the workers' log: a missing TARRY_ENCRYPTION_KEY or"
        " payload store, or code that cannot replay the run",
    )
