"""Cold replies at scale: a deploy restarts the workers, so every parked run is cold.

N runs (10,000 at full size) parked on one Tarry worker process with the shipped
settings and one dev server; first R replies (1,000) to random runs among those the
worker still caches (the warm reference, measured in the same run), then the worker is
stopped and a new one started on the same task queue, and R replies to random runs
among all N: none is in the new worker's cache, each replays its history before it
answers. Times are reply → next stop point, printed as ratios to the warm figure.

Then a rolling deploy (docs/guides/deployment.md): the workers are builds of one worker
deployment (`TARRY_DEPLOYMENT`, `TARRY_BUILD_ID`) from the start, every run pinned to
build v1. A worker of build v2 starts beside v1's and v2 is made current, v1 keeps
serving; R replies to random runs not replied to since the restart (none in v1's
cache). Each is answered on v1, the build the run is pinned to, and the run then hands
over to v2 (`workflows.builds`); the line counts the runs that reached v2.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import SetWorkerDeploymentCurrentVersionRequest
from temporalio.client import Client
from temporalio.service import RPCError

from bench.parked_runs import SLOW, START_CONCURRENCY, settled, start_all
from bench.rig import (
    Server,
    console,
    dev_server,
    ms,
    percentile,
    ratio,
    shipped_cache,
    shipped_label,
    table,
    tarry_env,
    worker_process,
)
from tarry.cli.processes import WorkerProcess
from tarry.client import Tarry
from tarry.contracts import Phase, RunInput
from tarry.temporal.servers import dev_server_args
from tarry.testing.scripted_model import ScriptedModel

OLD, NEW = "v1", "v2"
"""The builds of the rolling deploy."""
PATIENCE = 60.0
"""Seconds to wait for the server to take a build as current, and for the runs replied
to after the deploy to reach the new build."""


@dataclass
class Line:
    label: str
    latencies: list[float]
    timed_out_tasks: int
    failed_tasks: int


@dataclass
class Result:
    parked: int
    warm: Line
    cold: Line
    deploy: Line
    moved: int
    """Runs of the deploy line on build v2 after their reply."""


def warm_pool(parked: int) -> range:
    """The runs the worker still caches: the last started, less a margin for the starts
    that ran concurrently; all of them where the cache holds every run (and where it
    holds none: the row's label names the cache)."""
    cached = shipped_cache() - START_CONCURRENCY
    return range(max(0, parked - cached), parked) if cached > 0 else range(parked)


async def run(parked: int, replies: int, settle: float, root: Path, seed: int = 7) -> Result:
    """Parks `parked` runs on build v1, times `replies` warm replies, restarts the
    worker, times `replies` cold ones, deploys build v2 and times `replies` more; prints
    the table and returns the figures."""
    async with (
        dev_server(dev_server_args(), root) as server,
        ScriptedModel(when_exhausted="echo") as model,
    ):
        client = server.client
        queue = f"cold-{uuid.uuid4().hex[:8]}"
        deployment = f"tarry-{queue}"

        def build(build_id: str) -> WorkerProcess:
            env = {**tarry_env(), "TARRY_DEPLOYMENT": deployment, "TARRY_BUILD_ID": build_id}
            return worker_process(server, model, queue, root, env)

        worker, new_worker = build(OLD), build(NEW)
        tarry = Tarry(client, queue)
        picks = random.Random(seed)
        await worker.start()
        try:
            await make_current(client, deployment, OLD)

            async def start(workflow_id: str) -> None:
                await tarry.start(RunInput(), run_id=workflow_id)

            (await start_all(parked, start)).checked()
            assert worker.process is not None
            await settled(worker.process.pid, settle)
            pool = warm_pool(parked)
            warm_ids = [f"parked-{i}" for i in picks.sample(pool, min(replies, len(pool)))]
            warm = Line(
                f"warm: in the worker's cache ({shipped_label()})",
                *await timed_replies(client, tarry, warm_ids),
            )
            await worker.stop()
            await worker.start()  # a new process: its workflow cache is empty
            cold_ids = [f"parked-{i}" for i in picks.sample(range(parked), replies)]
            cold = Line(
                "cold: after the worker restarted", *await timed_replies(client, tarry, cold_ids)
            )
            await new_worker.start()
            await make_current(client, deployment, NEW)
            rest = sorted(set(range(parked)) - {int(i.removeprefix("parked-")) for i in cold_ids})
            deploy_ids = [f"parked-{i}" for i in picks.sample(rest, min(replies, len(rest)))]
            deployed = Line(
                f"deploy: {NEW} made current, answered on {OLD}, then on to {NEW}",
                *await timed_replies(client, tarry, deploy_ids),
            )
            moved = await _on_build(server, deploy_ids, NEW)
        finally:
            await new_worker.stop()
            await worker.stop()
        result = Result(parked, warm, cold, deployed, moved)
    console.print(render(result))
    return result


async def make_current(client: Client, deployment: str, build_id: str) -> None:
    """Makes `build_id` the deployment's current build, as an operator does (`temporal
    worker deployment set-current-version`): the server refuses until it has seen the
    build's workers poll, so it is asked again until then."""
    request = SetWorkerDeploymentCurrentVersionRequest(
        namespace=client.namespace, deployment_name=deployment, build_id=build_id
    )
    give_up = time.monotonic() + PATIENCE
    while True:
        try:
            await client.workflow_service.set_worker_deployment_current_version(request)
            return
        except RPCError:
            if time.monotonic() > give_up:
                raise
            await asyncio.sleep(0.2)


async def _on_build(server: Server, ids: Sequence[str], build_id: str) -> int:
    """How many of the runs `ids` are on `build_id`; a run's hand-over follows its
    answer, so the last ones are given until `PATIENCE` to get there."""
    waiting = set(ids)
    give_up = time.monotonic() + PATIENCE
    while True:
        for workflow_id in sorted(waiting):
            described = await server.client.get_workflow_handle(workflow_id).describe()
            versioning = described.raw_description.workflow_execution_info.versioning_info
            if versioning.deployment_version.build_id == build_id:
                waiting.discard(workflow_id)
        if not waiting or time.monotonic() > give_up:
            return len(ids) - len(waiting)
        await asyncio.sleep(0.5)


async def reply_troubles(
    client: Client, ids: Sequence[str], run_ids: Sequence[str]
) -> tuple[int, int]:
    """Workflow tasks that timed out and failed while the runs (`ids`, in the runs
    `run_ids` of their chains) answered their last reply: the
    events after the task that parked the run, the one before the task that accepted the
    reply. Not those of the start, when thousands of runs starting at once time tasks out
    on a busy worker."""
    timed_out = failed = 0
    for workflow_id, run_id in zip(ids, run_ids, strict=True):
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        types = [e.event_type for e in history.events]
        accepted = _last(types, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED, len(types))
        taken = _last(types, EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, accepted)
        # A run whose start was still under way when the reply came: from its start.
        parked = _last(types, EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, taken, default=0)
        timed_out += types[parked:].count(EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT)
        failed += types[parked:].count(EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED)
    return timed_out, failed


def _last(
    types: Sequence[EventType.ValueType],
    wanted: EventType.ValueType,
    before: int,
    default: int | None = None,
) -> int:
    """The index of the last event of type `wanted` before `before`; `default` if none
    (None: there must be one)."""
    found = [i for i, t in enumerate(types[:before]) if t == wanted]
    if found or default is None:
        return found[-1]
    return default


async def timed_replies(
    client: Client, tarry: Tarry, ids: Sequence[str]
) -> tuple[list[float], int, int]:
    """One reply to each run in turn, timed from `send` to the run's next stop point;
    then the workflow tasks that timed out and failed while they answered."""
    # The runs that answer: after a deploy, their histories end at the hand-over.
    runs = [(await client.get_workflow_handle(i).describe()).run_id for i in ids]
    latencies = []
    for n, workflow_id in enumerate(ids):
        began = time.perf_counter()
        state = await tarry.get(workflow_id).send(f"reply {n}")
        latencies.append(time.perf_counter() - began)
        assert state.phase is Phase.WAITING_USER, state
    return (latencies, *await reply_troubles(client, ids, runs))


def render(result: Result) -> Table:
    warm_p50, warm_p99 = (percentile(result.warm.latencies, p) for p in (50, 99))
    t = table(
        f"Cold replies: {result.parked:,} parked runs on one worker process (build {OLD}), then "
        f"the worker restarted; {len(result.cold.latencies):,} replies to random runs, beside "
        f"{len(result.warm.latencies):,} to runs it caches before the restart. Then build {NEW} "
        f"deployed beside {OLD} and made current; {len(result.deploy.latencies):,} replies to "
        f"runs not replied to since the restart ({result.moved:,} of them on {NEW} after)",
        "replies", "p50 ms", "p99 ms", "max ms", "p50 x warm", "p99 x warm", f"> {SLOW:g} s",
        "WFT timed out", "WFT failed",
    )  # fmt: skip
    for line in (result.warm, result.cold, result.deploy):
        p50, p99, top = (percentile(line.latencies, p) for p in (50, 99, 100))
        t.add_row(
            line.label,
            ms(p50),
            ms(p99),
            ms(top),
            ratio(p50, warm_p50),
            ratio(p99, warm_p99),
            str(sum(x > SLOW for x in line.latencies)),
            str(line.timed_out_tasks),
            str(line.failed_tasks),
        )
    return t
