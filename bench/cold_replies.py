"""Cold replies at scale: a deploy restarts the workers, so every parked run is cold.

N runs (10,000 at full size) parked on one Tarry worker process with the shipped
settings and one dev server; first R replies (1,000) to random runs among those the
worker still caches (the warm reference, measured in the same run), then the worker is
stopped and a new one started on the same task queue, and R replies to random runs
among all N: none is in the new worker's cache, each replays its history before it
answers. Times are reply → next stop point, printed as ratios to the warm figure.

A rolling deploy to a second build (worker deployment versioning) is not measured:
Tarry's worker has no build setting in this tree, so the table says so in its title.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from bench.parked_runs import SLOW, START_CONCURRENCY, settled, start_all, task_troubles
from bench.rig import (
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
from tarry.client import Tarry
from tarry.contracts import Phase, RunInput
from tarry.servers import dev_server_args
from tarry.testing.scripted_model import ScriptedModel


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


def warm_pool(parked: int) -> range:
    """The runs the worker still caches: the last started, less a margin for the starts
    that ran concurrently; all of them where the cache holds every run (and where it
    holds none: the row's label names the cache)."""
    cached = shipped_cache() - START_CONCURRENCY
    return range(max(0, parked - cached), parked) if cached > 0 else range(parked)


async def run(parked: int, replies: int, settle: float, root: Path, seed: int = 7) -> Result:
    """Parks `parked` runs, times `replies` warm replies, restarts the worker, times
    `replies` cold ones; prints the table and returns the figures."""
    async with (
        dev_server(dev_server_args(), root) as server,
        ScriptedModel(when_exhausted="echo") as model,
    ):
        client = server.client
        queue = f"cold-{uuid.uuid4().hex[:8]}"
        worker = worker_process(server, model, queue, root, tarry_env())
        tarry = Tarry(client, queue)
        picks = random.Random(seed)
        await worker.start()
        try:

            async def start(workflow_id: str) -> None:
                await tarry.start(RunInput(), run_id=workflow_id)

            await start_all(parked, start)
            assert worker.process is not None
            await settled(worker.process.pid, settle)
            pool = warm_pool(parked)
            warm_ids = [f"parked-{i}" for i in picks.sample(pool, min(replies, len(pool)))]
            warm = await _replies(tarry, warm_ids)
            await worker.stop()
            await worker.start()  # a new process: its workflow cache is empty
            cold_ids = [f"parked-{i}" for i in picks.sample(range(parked), replies)]
            cold = await _replies(tarry, cold_ids)
        finally:
            await worker.stop()
        result = Result(
            parked,
            Line(f"warm: in the worker's cache ({shipped_label()})", warm,
                 *await task_troubles(client, warm_ids)),
            Line("cold: after the worker restarted", cold, *await task_troubles(client, cold_ids)),
        )  # fmt: skip
    console.print(render(result))
    return result


async def _replies(tarry: Tarry, ids: Sequence[str]) -> list[float]:
    """One reply to each run in turn, timed from `send` to the run's next stop point."""
    latencies = []
    for n, workflow_id in enumerate(ids):
        began = time.perf_counter()
        state = await tarry.get(workflow_id).send(f"reply {n}")
        latencies.append(time.perf_counter() - began)
        assert state.phase is Phase.WAITING_USER, state
    return latencies


def render(result: Result) -> Table:
    warm_p50, warm_p99 = (percentile(result.warm.latencies, p) for p in (50, 99))
    t = table(
        f"Cold replies: {result.parked:,} parked runs on one worker process, then the worker "
        f"restarted; {len(result.cold.latencies):,} replies to random runs, beside "
        f"{len(result.warm.latencies):,} to runs it caches before the restart. "
        "Not measured: a rolling deploy to a second build (no worker versioning in this tree)",
        "replies", "p50 ms", "p99 ms", "max ms", "p50 x warm", "p99 x warm", f"> {SLOW:g} s",
        "WFT timed out", "WFT failed",
    )  # fmt: skip
    for line in (result.warm, result.cold):
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
