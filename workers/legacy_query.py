"""Evicts a cached run that a legacy query moved ahead of the server.

Works around an sdk-core bug (temporalio 1.35; docs/sdk-legacy-query-eviction.md): a
query the server dispatches directly (a "legacy query": core labels it `legacy_query`)
carries the run's history, including the events of a workflow task still pending on the
server: one queued for a dead worker's sticky queue, or one started but never delivered
(lost in a server restart). Core applies those events, runs the workflow past them as if
live, answers the query, and keeps the run cached ahead of the server, its commands
unsent. The next workflow task sends them together with whatever that task brought (an
update's acceptance), in an order replay does not reproduce: `[TMPRL1100] Nondeterminism
error`, and the run is stuck.

When such a query arrives, the worker asks core to evict the run before it answers, so
the run's next workflow task replays from history as on a fresh worker. Only then: core
labels every directly dispatched query `legacy_query`, also one to a run in sync with
the server, and evicting on each would make every `state` poll cost the run's next task
a full replay.

Whether the query's history went past the run's last completed task shows only on the
server: a task the server started but no worker got looks, to the worker, like any task
it did get. So the first legacy query after a run applied history asks the server whether
it recorded the completion of the task the run last applied (the event after the last one
the run applied is `WorkflowTaskCompleted`); if so the run is in sync until it applies
history again.

It reaches into the SDK's private worker (`temporalio.worker._workflow`), so temporalio
is pinned to the version it was checked against, and `install` refuses, with
`LegacyQueryHookMissing`, an SDK that lacks the hooks rather than run without them.
`tests/test_sdk_legacy_query_bug.py` says when an SDK upgrade fixes the bug.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta

import temporalio.bridge.worker
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Worker

LEGACY_QUERY_ID = "legacy_query"
"""The query id core gives a query dispatched directly rather than on a workflow task."""

COMPLETION_CHECK_TIMEOUT = timedelta(seconds=5)
"""How long a legacy query waits for each page of the run's latest history; without an
answer the run is evicted, which is always safe."""

COMPLETION_CHECK_PAGE = 16
"""Events per page, read from the newest: what came after the task a run last applied
is usually a few events (its completion, its commands' events, a task pending)."""

log = logging.getLogger("tarry.worker")

Handler = Callable[[WorkflowActivation], Awaitable[None]]
TaskCompleted = Callable[[str, str, int], Awaitable[bool]]
"""Whether the server recorded the completion of the workflow task whose history a run
applied up to an event: (workflow id, run id, that event's id)."""


def brings_a_legacy_query(act: WorkflowActivation) -> bool:
    """Whether the activation answers a query core got directly, not on a workflow task."""
    return any(job.query_workflow.query_id == LEGACY_QUERY_ID for job in act.jobs)


class LegacyQueryHookMissing(RuntimeError):
    """The installed SDK lacks the private hooks the legacy-query eviction needs."""


@dataclass
class _Cached:
    """A run in the worker's cache."""

    workflow_id: str
    applied: int
    """The id of the last history event the run applied (an activation's `history_length`)."""
    in_sync: bool = False
    """The server recorded the completion of the task the run last applied."""


class LegacyQueryEviction:
    """Wraps a worker's activation handler: evicts a cached run before it answers a
    legacy query whose history may have gone past the run's last completed task."""

    def __init__(
        self, handle: Handler, request_eviction: Callable[[str], None], completed: TaskCompleted
    ) -> None:
        self._handle = handle
        self._request_eviction = request_eviction
        self._completed = completed
        self._runs: dict[str, _Cached] = {}
        """Cached runs; core's `remove_from_cache` activation removes them."""

    async def __call__(self, act: WorkflowActivation) -> None:
        variants = {job.WhichOneof("variant") for job in act.jobs}
        if "remove_from_cache" in variants:
            self._runs.pop(act.run_id, None)
        elif variants != {"query_workflow"}:
            self._note(act)
        if brings_a_legacy_query(act) and not await self._in_sync(act.run_id):
            self._runs.pop(act.run_id, None)
            log.info("evicting run %s: a legacy query brought it new history", act.run_id)
            # Requested before the query is answered, not after: once core has the answer,
            # it hands a workflow task that reached the worker meanwhile (buffered behind
            # the query) straight to the run as it stands, ahead of the server; an eviction
            # requested then comes after that task's commands. Requested now, core answers
            # the query, evicts, and gives the buffered task to a run rebuilt from history.
            self._request_eviction(act.run_id)
        await self._handle(act)

    def _note(self, act: WorkflowActivation) -> None:
        """The run applied history: from a workflow task, or from a query's history."""
        for job in act.jobs:
            if job.HasField("initialize_workflow"):
                workflow_id = job.initialize_workflow.workflow_id
                self._runs[act.run_id] = _Cached(workflow_id, act.history_length)
                return
        if (run := self._runs.get(act.run_id)) is not None:
            run.applied, run.in_sync = act.history_length, False

    async def _in_sync(self, run_id: str) -> bool:
        run = self._runs.get(run_id)
        if run is None:
            return False
        if not run.in_sync:
            run.in_sync = await self._completed(run.workflow_id, run_id, run.applied)
        return run.in_sync


def install(worker: Worker) -> None:
    """Installs the eviction on a worker built with a workflow cache; call before it runs.

    Raises `LegacyQueryHookMissing` if this SDK lacks what it needs."""
    workflow_worker = getattr(worker, "_workflow_worker", None)
    handle = getattr(workflow_worker, "_handle_activation", None)
    bridge_worker = getattr(workflow_worker, "_bridge_worker", None)
    if (
        not callable(handle)
        or not callable(bridge_worker)
        or not callable(getattr(temporalio.bridge.worker.Worker, "request_workflow_eviction", None))
    ):
        raise LegacyQueryHookMissing(
            "this temporalio lacks the private worker hooks "
            "(_WorkflowWorker._handle_activation, _bridge_worker, "
            "bridge Worker.request_workflow_eviction) that Tarry's legacy-query eviction "
            "needs; without it a cached run can be left with a history that does not "
            "replay (docs/sdk-legacy-query-eviction.md). Install the pinned temporalio "
            "(see pyproject.toml), or run without a workflow cache: TARRY_WORKFLOW_CACHE=0"
        )

    def request_eviction(run_id: str) -> None:
        bridge_worker().request_workflow_eviction(run_id)

    eviction = LegacyQueryEviction(handle, request_eviction, task_completed_on(worker.client))
    # Looked up on the instance each time an activation arrives (`_WorkflowWorker.run`).
    workflow_worker._handle_activation = eviction  # type: ignore[union-attr]


def task_completed_on(client: Client) -> TaskCompleted:
    """`TaskCompleted` read from the run's history on the server `client` talks to,
    newest events first; False when the server does not answer."""

    async def task_completed(workflow_id: str, run_id: str, applied: int) -> bool:
        request = GetWorkflowExecutionHistoryReverseRequest(
            namespace=client.namespace,
            execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
            maximum_page_size=COMPLETION_CHECK_PAGE,
        )
        service = client.workflow_service
        try:
            while True:
                page = await service.get_workflow_execution_history_reverse(
                    request, timeout=COMPLETION_CHECK_TIMEOUT
                )
                for event in page.history.events:
                    if event.event_id <= applied + 1:
                        return (
                            event.event_id == applied + 1
                            and event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
                        )
                if not page.next_page_token:
                    return False
                request.next_page_token = page.next_page_token
        except RPCError:
            return False

    return task_completed
