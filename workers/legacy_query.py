"""Evicts a cached run that a legacy query moved ahead of the server.

Works around an sdk-core bug (temporalio 1.35; docs/sdk-legacy-query-eviction.md): a
query the server dispatches directly (a "legacy query": core labels it `legacy_query`)
carries the run's history, including events after its last completed workflow task when
one is pending, e.g. still queued for a dead worker's sticky queue. Core applies those
events, runs the workflow past them as if live, answers the query, and keeps the run
cached ahead of the server, its commands unsent. The next workflow task sends them
together with whatever that task brought (an update's acceptance), in an order replay
does not reproduce: `[TMPRL1100] Nondeterminism error`, and the run is stuck.

When such a query arrives, the worker asks core to evict the run before it answers, so
the run's next workflow task replays from history as on a fresh worker. Only then: core
labels every directly dispatched query `legacy_query`, also one to a run in sync with
the server, and evicting on each would make every `state` poll cost the run's next task
a full replay.

A run is in sync with the server when the history it last applied ends with a workflow
task the server started. An activation's `timestamp` is the time of the workflow task
started event it belongs to, so a live activation that applies new events under an
unchanged timestamp applies events past the last started task: only a query task does
that. A run rebuilt from history (an `initialize_workflow` job replaying) is in sync only
once a live workflow task confirms it.

It reaches into the SDK's private worker (`temporalio.worker._workflow`), so temporalio
is pinned to the version it was checked against, and `install` refuses, with
`LegacyQueryHookMissing`, an SDK that lacks the hooks rather than run without them.
`tests/test_sdk_legacy_query_bug.py` says when an SDK upgrade fixes the bug.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import temporalio.bridge.worker
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.worker import Worker

LEGACY_QUERY_ID = "legacy_query"
"""The query id core gives a query dispatched directly rather than on a workflow task."""

log = logging.getLogger("tarry.worker")

Handler = Callable[[WorkflowActivation], Awaitable[None]]


class LegacyQueryHookMissing(RuntimeError):
    """The installed SDK lacks the private hooks the legacy-query eviction needs."""


@dataclass
class _Applied:
    """What a cached run last applied, as its activations said."""

    history_length: int
    task_started: int
    """The activation's `timestamp`, in nanoseconds."""
    in_sync: bool


class LegacyQueryEviction:
    """Wraps a worker's activation handler: tracks whether each cached run is in sync with
    the server, and evicts it after a legacy query that found it out of sync."""

    def __init__(self, handle: Handler, request_eviction: Callable[[str], None]) -> None:
        self._handle = handle
        self._request_eviction = request_eviction
        self._runs: dict[str, _Applied] = {}
        """Cached runs; core's `remove_from_cache` activation removes them."""

    async def __call__(self, act: WorkflowActivation) -> None:
        variants = [job.WhichOneof("variant") for job in act.jobs]
        if "remove_from_cache" in variants:
            self._runs.pop(act.run_id, None)
        else:
            self._note(act, variants)
        legacy = any(
            job.HasField("query_workflow") and job.query_workflow.query_id == LEGACY_QUERY_ID
            for job in act.jobs
        )
        applied = self._runs.get(act.run_id)
        if legacy and (applied is None or not applied.in_sync):
            self._runs.pop(act.run_id, None)
            log.info("evicting run %s: a legacy query brought it new history", act.run_id)
            # Requested before the query is answered, not after: once core has the answer,
            # it hands a workflow task that reached the worker meanwhile (buffered behind
            # the query) straight to the run as it stands, ahead of the server; an eviction
            # requested then comes after that task's commands. Requested now, core answers
            # the query, evicts, and gives the buffered task to a run rebuilt from history.
            self._request_eviction(act.run_id)
        await self._handle(act)

    def _note(self, act: WorkflowActivation, variants: Sequence[str | None]) -> None:
        if "initialize_workflow" in variants:
            # Live: the run's first workflow task. Replaying: rebuilt from a history
            # that a query task may have brought.
            self._runs[act.run_id] = _Applied(
                act.history_length, act.timestamp.ToNanoseconds(), in_sync=not act.is_replaying
            )
            return
        applied = self._runs.get(act.run_id)
        if applied is None or set(variants) == {"query_workflow"}:
            return
        task_started = act.timestamp.ToNanoseconds()
        if not act.is_replaying:  # replayed tasks were completed: they confirm nothing
            if task_started != applied.task_started:
                applied.in_sync = True  # a workflow task the server started
            elif act.history_length > applied.history_length:
                applied.in_sync = False  # events past the last started task
        applied.history_length = act.history_length
        applied.task_started = task_started


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

    # Looked up on the instance each time an activation arrives (`_WorkflowWorker.run`).
    workflow_worker._handle_activation = LegacyQueryEviction(handle, request_eviction)  # type: ignore[union-attr]
