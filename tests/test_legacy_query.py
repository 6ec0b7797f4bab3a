"""The legacy-query eviction (`workers.legacy_query`): cached runs stay cached while
clients poll them, and a worker whose SDK lacks the hook refuses to start.

That it evicts when it must: `test_worker_crash.py::
test_a_reply_after_a_query_while_the_worker_was_dead_leaves_a_replayable_history` and
`test_legacy_query_lost_task.py`, and early enough: `test_legacy_query_race.py`.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import temporalio.bridge.worker
import temporalio.client
import temporalio.worker
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import (
    ExecuteWorkflowInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from tarry.config.settings import TarrySettings
from tarry.contracts import Phase
from tarry.testing.scripted_model import say
from tests.deadline import TIMEOUT
from workers.legacy_query import LegacyQueryHookMissing
from workers.plugin import TarryPlugin


class WorkflowStarts(temporalio.client.Interceptor, temporalio.worker.Interceptor):
    """Counts, per workflow id, the times a worker built the workflow object: once when
    the run is cached throughout, once more after each eviction (a replay from history)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        counts = self.counts

        class Counting(WorkflowInboundInterceptor):
            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                counts[workflow.info().workflow_id] += 1
                return await super().execute_workflow(input)

        return Counting


async def _builds_while_polled(temporal: Client, agent_factory: Any, workflow_cache: int) -> int:
    """A run that answers, is polled, gets a reply and answers again: how many times
    the worker built its workflow object."""
    starts = WorkflowStarts()
    config = temporal.config()
    config["interceptors"] = [starts]
    client = Client(**config)
    agent = await agent_factory(client=client, workflow_cache=workflow_cache)
    agent.model.add(say("Hi."), say("Bye."))
    run = await agent.start("hello")
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    for _ in range(10):
        await run.state()  # a query each: dispatched directly, labelled `legacy_query`
    await run.send("bye", id="m1")
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    return starts.counts[run.id]


async def test_polling_a_cached_runs_state_replays_nothing(
    temporal: Client, agent_factory: Any
) -> None:
    assert await _builds_while_polled(temporal, agent_factory, workflow_cache=1000) == 1


async def test_without_a_cache_every_workflow_task_replays_the_run(
    temporal: Client, agent_factory: Any
) -> None:
    # What the count above would show had the polls evicted the run.
    assert await _builds_while_polled(temporal, agent_factory, workflow_cache=0) > 1


def _plugin(tmp_path: Path, workflow_cache: int) -> TarryPlugin:
    settings = TarrySettings.model_construct(
        tarry_workspace_root=tmp_path / "workspaces",
        tarry_storage_dir=tmp_path / "payloads",
        tarry_workflow_cache=workflow_cache,
    )
    return TarryPlugin(settings)


def _worker(temporal: Client, plugin: TarryPlugin) -> temporalio.worker.Worker:
    queue = f"never-run-{uuid.uuid4().hex[:8]}"  # core allows one worker per queue
    return temporalio.worker.Worker(temporal, task_queue=queue, plugins=[plugin])


async def test_a_worker_whose_sdk_lacks_the_eviction_hook_refuses_to_start(
    temporal: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not a fake of Temporal's behaviour: the SDK as an upgrade might ship it, without
    # the private method the workaround calls.
    monkeypatch.delattr(temporalio.bridge.worker.Worker, "request_workflow_eviction")
    worker = _worker(temporal, _plugin(tmp_path, workflow_cache=1000))

    with pytest.raises(LegacyQueryHookMissing, match="request_workflow_eviction") as refused:
        await worker.run()
    assert "TARRY_WORKFLOW_CACHE=0" in str(refused.value)


async def test_a_worker_without_a_cache_needs_no_hook(
    temporal: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(temporalio.bridge.worker.Worker, "request_workflow_eviction")
    plugin = _plugin(tmp_path, workflow_cache=0)
    worker = _worker(temporal, plugin)
    ran: list[temporalio.worker.Worker] = []

    async def run(started: temporalio.worker.Worker) -> None:
        ran.append(started)

    await plugin.run_worker(worker, run)  # what `worker.run()` calls before it polls

    assert ran == [worker]
    assert worker.config(active_config=True)["max_cached_workflows"] == 0
